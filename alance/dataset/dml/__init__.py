"""Changing rows: DELETE (:mod:`.delete`), UPDATE (:mod:`.update`), MERGE INSERT
(:mod:`.merge_insert`) and what they share (:mod:`.results`).

May import versions, fragments, query and commit.
"""
