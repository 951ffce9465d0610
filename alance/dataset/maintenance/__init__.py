"""Keeping a dataset healthy: compaction (:mod:`.compaction`, :mod:`.compaction_plan`),
cleanup of old versions (:mod:`.cleanup`), restore, validation and statistics.

May import versions, fragments, query, commit and dml.
"""
