"""Indices at read time: reading pylance-built BTREE / BITMAP / ZONEMAP indices and using
them to narrow filtered scans; IVF vector indices (:mod:`.ivf`, :mod:`.ivf_reader`) and
INVERTED full-text indices (:mod:`.inverted` with the analyzer of :mod:`.tokenizer` and
:mod:`.porter2`, read by :mod:`.inverted_reader`).

Format modules do no IO: :mod:`.rowaddr` (row-address sets in index files), :mod:`.btree`,
:mod:`.bitmap`, :mod:`.zonemap`, :mod:`.types`, :mod:`.predicates`, :mod:`.describe`. The
index files are read through the dataset's async store by :mod:`.reader`; :mod:`.planner`
decides which indices narrow a filter. Building and dropping indices:
:mod:`alance.dataset.maintenance.index_build`; the dataset's index methods:
:mod:`alance.dataset.maintenance.indices`.
"""
