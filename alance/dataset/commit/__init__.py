"""Making a new version: the commit loop (:mod:`.loop`), the IO half of rebasing
(:mod:`.rebase`), and pylance's hand-built operations (:mod:`.operations`).

(Commit *backends* -- how a manifest is put atomically -- live in :mod:`alance.commit`.)
May import :mod:`alance.dataset.versions`, :mod:`alance.dataset.fragments` and
:mod:`alance.dataset.query`.
"""
