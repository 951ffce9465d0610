"""Changing the schema: new columns computed or merged (:mod:`.new_columns`, :mod:`.backfill`,
:mod:`.batch_udf`), dropped and altered columns (:mod:`.alter`), one fragment's columns
(:mod:`.fragment_columns`), config and metadata maps (:mod:`.config`).

May import versions, fragments, query, commit, dml and maintenance.
"""
