"""Scan plans as text, in the shape of pylance's ``explain_plan`` / ``analyze_plan``.

A scan is one read node (``LanceRead``: the columns read, fragments, limit/offset, row id
columns, filter) under a projection when the output differs from what is read.
``analyze_plan`` runs the scan and adds what it did: rows out, rows scanned, fragments, and
the bytes, ranges and requests it read from the store; alance's page-statistics pruning
follows as its own line.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from alance.io.store import IoCounter, counting_io

if TYPE_CHECKING:
    from alance.dataset.query.scan import Scanner


def _read_node(scan: Scanner) -> str:
    names = ", ".join(f.name for f in scan.read_fields)
    limit, offset = scan.limit, scan.offset
    window = ("None" if limit is None and not offset
              else f"Some({offset}..{'' if limit is None else offset + limit})")
    flt = scan._filter_arg if scan.filter is not None else "--"
    return (f"LanceRead: uri={scan.ctx.store.uri}/data, projection=[{names}], "
            f"num_fragments={len(scan.fragments)}, range_before=None, range_after={window}, "
            f"row_id={str(scan.with_row_id).lower()}, "
            f"row_addr={str(scan.with_row_address).lower()}, "
            f"full_filter={flt}, refine_filter={flt}")


def _index_lines(scan: Scanner, indent: str) -> list[str]:
    """The scalar indices the scan uses, as pylance shows them."""
    plan = scan._index_plan
    if plan is None:
        return []
    from alance.dataset.query.indices.planner import describe_plan
    return [f"{indent}ScalarIndexQuery: query={describe_plan(plan)}"]


def _projection(scan: Scanner) -> str | None:
    read = [f.name for f in scan.read_fields]
    out = scan.output_schema.names
    if out == read:
        return None
    return "ProjectionExec: expr=[" + ", ".join(out) + "]"


def explain_plan(scan: Scanner, verbose: bool = False) -> str:
    """The plan of ``scan`` without running it (``verbose`` adds the pruning predicate)."""
    lines = []
    top = _projection(scan)
    if top is not None:
        lines.append(top)
    lines.append(("  " if top is not None else "") + _read_node(scan))
    lines.extend(_index_lines(scan, "    " if top is not None else "  "))
    if verbose:
        lines.append(f"pruning predicate: {scan.stats.predicate or 'none'}")
    return "\n".join(lines) + "\n"


async def analyze_plan(scan: Scanner) -> str:
    """Run ``scan`` (discarding its rows) and describe what it did."""
    rows = 0
    io: IoCounter
    start = time.perf_counter()
    with counting_io() as io:
        async for batch in scan.to_batches():
            rows += batch.num_rows
    elapsed = time.perf_counter() - start
    stats = scan.stats
    metrics = (f"output_rows={rows}, rows_scanned={stats.rows_scanned}, "
               f"fragments_scanned={len(scan.fragments)}, bytes_read={io.bytes_read}, "
               f"iops={io.iops}, requests={io.requests}")
    lines = [f"AnalyzeExec verbose=true, elapsed={elapsed * 1e3:.3f}ms, metrics=[]"]
    indent = "  "
    top = _projection(scan)
    if top is not None:
        lines.append(f"{indent}{top}, metrics=[output_rows={rows}]")
        indent += "  "
    lines.append(f"{indent}{_read_node(scan)}, metrics=[{metrics}]")
    lines.extend(_index_lines(scan, indent + "  "))
    lines.append(f"pages skipped by statistics: {stats.pages_skipped} "
                 f"({stats.bytes_skipped} bytes, {stats.rows_skipped} rows)")
    return "\n".join(lines) + "\n"


__all__ = ["analyze_plan", "explain_plan"]
