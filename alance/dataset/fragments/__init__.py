"""A fragment's files: reading data files (:mod:`.data_file`, :mod:`.read`), writing them
(:mod:`.write`, :mod:`.inputs`, :mod:`.progress`), deletion files (:mod:`.deletions`), fragment
metadata values (:mod:`.metadata`), JSON and blob column transforms, zone maps.

May import :mod:`alance.dataset.versions` only.
"""
