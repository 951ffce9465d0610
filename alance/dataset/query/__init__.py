"""Reading a version: scans (:mod:`.scan`, :mod:`.options`, :mod:`.pruning`, :mod:`.plan_text`),
random access (:mod:`.take`, :mod:`.take_batch`, :mod:`.take_pages`), row ids
(:mod:`.row_ids`), the change feed (:mod:`.changes`), blobs, projections, vector search, SQL.

May import :mod:`alance.dataset.versions` and :mod:`alance.dataset.fragments`.
"""
