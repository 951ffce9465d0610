"""Lance data file format 2.x (2.0, 2.1, 2.2): pure decoders and read plans, no IO.

* :func:`open_file` plans reading a file's footer, offset tables, column metadata and schema
  (usually one request for the file's tail) into a :class:`V2File`.
* :class:`V2FileReader` plans reads of row ranges and of selected rows; plans are generators
  that yield byte ranges (see :mod:`alance.format.legacy.plan`).

2.0 files use per-field columns with array encodings (:mod:`.v20`); 2.1+ files use leaf
columns with structural layouts (mini-block :mod:`.miniblock`, full-zip :mod:`.fullzip`,
constant) over compressive encodings (:mod:`.compressive`), with repetition/definition levels
(:mod:`.levels`).
"""

from alance.format.v2.container import FOOTER_SIZE, MAGIC, Footer, V2File, open_file, parse_footer
from alance.format.v2.reader import V2FileReader

__all__ = ["FOOTER_SIZE", "MAGIC", "Footer", "V2File", "V2FileReader", "open_file",
           "parse_footer"]
