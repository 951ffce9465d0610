"""One version of a dataset: its manifest (:mod:`.snapshot`), its names (:mod:`.tags`) and the
extra roots its files may live under (:mod:`.bases`).

The bottom of the dataset layer: imports nothing else from :mod:`alance.dataset`.
"""
