"""Lance indices: reading pylance-built ones and building ones pylance reads.

Format modules do no IO: :mod:`~alance.index.rowaddr` (row-address sets in index files),
:mod:`~alance.index.btree`, :mod:`~alance.index.bitmap`, :mod:`~alance.index.types`,
:mod:`~alance.index.describe`. The IO layer reads and writes index files through the
dataset's async store: :mod:`~alance.index.reader`, :mod:`~alance.index.planner` (scalar
indices narrowing filtered scans), :mod:`~alance.index.build`.
"""
