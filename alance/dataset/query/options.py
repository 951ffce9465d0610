"""pylance's other scanner arguments, mapped onto alance's scan.

``batch_readahead`` sets how many chunks are read ahead, ``use_stats`` turns page-statistics
pruning on or off and ``strict_batch_size`` makes every batch but the last exactly
``batch_size`` rows. Arguments that tune pylance's own engine (IO buffer sizes, fragment
read-ahead, late materialisation, prefiltering, index use) are accepted and leave the result
unchanged: alance plans those itself. Arguments asking for what alance does not do yet
(ordering, row address allow/block lists) are refused with
:class:`~alance.errors.UnsupportedFeatureError`, never ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from alance.errors import InvalidInputError, UnsupportedFeatureError

#: Accepted with no effect on the rows returned (alance's planner decides these).
TUNING = frozenset({"fragment_readahead", "io_buffer_size", "batch_size_bytes",
                    "late_materialization", "prefilter", "fast_search",
                    "scan_in_order", "disable_scoring_autoprojection", "index_segments"})
#: Features whose results alance cannot give yet.
UNSUPPORTED = frozenset({"order_by", "scan_stats_callback",
                         "row_addr_allowlist", "row_addr_blocklist"})


def scan_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments for :class:`~alance.dataset.query.scan.Scanner` from pylance's."""
    out: dict[str, Any] = {}
    for name, value in options.items():
        if value is None or name in TUNING:
            continue
        if name == "batch_readahead":
            if not isinstance(value, int) or value < 1:
                raise InvalidInputError(f"batch_readahead must be a positive integer: {value!r}")
            out["read_ahead"] = value
        elif name == "use_scalar_index":
            out["use_index"] = bool(value)
        elif name == "use_stats":
            out["prune"] = bool(value)
        elif name == "strict_batch_size":
            out["strict_batch_size"] = bool(value)
        elif name == "include_deleted_rows":
            out["include_deleted_rows"] = bool(value)
        elif name == "blob_handling":
            if value not in ("blobs_descriptions", "all_descriptions"):
                raise UnsupportedFeatureError(
                    f"blob_handling={value!r} is not supported; scans return blob "
                    "descriptors and take_blobs the bytes")
        elif name in UNSUPPORTED:
            raise UnsupportedFeatureError(f"scanner argument {name!r} is not supported yet")
        else:
            raise InvalidInputError(f"unknown scanner argument {name!r}")
    return out


__all__ = ["scan_options"]
