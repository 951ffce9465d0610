"""The v0.1/v0.2 ("legacy") Lance data file format: pure encoders, decoders and read plans.

* :class:`LegacyFileWriter` turns record batches into file bytes (one row group per
  ``write_batch``, or many per ``write_batches``).
* :func:`open_file` plans reading a file's footer, metadata and page table;
  :class:`LegacyFileReader` plans reading row groups, selected rows, dictionaries and page
  statistics. Plans are generators that yield byte ranges (see :mod:`.plan`); no IO here.
"""

from alance.format.legacy.decode import read_dictionary_values
from alance.format.legacy.encode import encode_dictionary_values
from alance.format.legacy.layout import (
    FOOTER_SIZE,
    MAGIC,
    Footer,
    PageTable,
    encode_footer,
    parse_footer,
    parse_metadata,
)
from alance.format.legacy.plan import Plan, Range, coalesced, fetch_from, gather, run_plan
from alance.format.legacy.reader import LegacyFile, LegacyFileReader, open_file
from alance.format.legacy.stats import supports_statistics
from alance.format.legacy.writer import LegacyFileWriter

__all__ = [
    "FOOTER_SIZE",
    "MAGIC",
    "Footer",
    "LegacyFile",
    "LegacyFileReader",
    "LegacyFileWriter",
    "PageTable",
    "Plan",
    "Range",
    "coalesced",
    "encode_dictionary_values",
    "encode_footer",
    "fetch_from",
    "gather",
    "open_file",
    "parse_footer",
    "parse_metadata",
    "read_dictionary_values",
    "run_plan",
    "supports_statistics",
]
