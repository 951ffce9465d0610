"""Jobs cut into tasks that engines such as Spark run in many processes, committed once by the
driver: writes (:mod:`.write`), deletes and updates (:mod:`.dml`), compaction, reads and the
change feed, and the staging records every job keeps (:mod:`.staging`).

May import every other part of :mod:`alance.dataset` except the top-level handle modules other
than :mod:`alance.dataset.api`.
"""
