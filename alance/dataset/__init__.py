"""The dataset layer: Lance tables built from the format layer and the IO layer.

Packages, lowest first. Each may import the ones before it (and ``alance.format``,
``alance.io``, ``alance.commit``, ``alance.transaction``, ``alance.filter``), never one after it;
``tests/test_layers.py`` checks this and that no import cycle exists:

* :mod:`~alance.dataset.versions` -- one version: its manifest (snapshot), tags, base paths.
* :mod:`~alance.dataset.fragments` -- reading and writing a fragment's files: data files,
  deletion files, the streaming writer, the input normaliser, fragment metadata.
* :mod:`~alance.dataset.query` -- scans, takes, pruning, row ids, the change feed, blobs,
  projections, vector search, SQL.
* :mod:`~alance.dataset.commit` -- the commit loop, rebasing, hand-built operations.
* :mod:`~alance.dataset.dml` -- delete, update, merge_insert.
* :mod:`~alance.dataset.maintenance` -- compaction, cleanup, restore, validation, statistics.
* :mod:`~alance.dataset.evolution` -- adding, merging, altering and dropping columns; config
  and metadata.
* :mod:`~alance.dataset.api` -- :class:`~alance.dataset.api.LanceDataset`, the handle users hold.
* :mod:`~alance.dataset.group_insert` -- group commit: concurrent small inserts written
  by shared commits.
* :mod:`~alance.dataset.distributed` -- jobs cut into tasks for engines such as Spark.
* The remaining top-level modules are the other objects users hold: fragments
  (:mod:`~alance.dataset.fragment`), hand-built commits (:mod:`~alance.dataset.manual_commit`),
  compaction tasks, shards, ``drop``.
"""
