"""An async web service over one alance dataset (aiohttp): take, filter, stream and append.

    python examples/service.py [--uri /tmp/service.lance] [--port 8080]
    python examples/service.py --selftest        # start, call every endpoint, stop

Endpoints:

* ``GET /count``                       rows in the newest version
* ``GET /take?rows=1,5,9``             rows by position, as JSON
* ``GET /scan?filter=id<10&limit=5``   matching rows streamed as NDJSON, batch by batch
* ``POST /append``                     a JSON list of rows, appended (one commit)

One :class:`alance.LanceDataset` handle serves every request: concurrent takes on it share
reads, and its store client and caches are reused. Appends go through an
:class:`alance.BatchedInserter` (group commit: appends that arrive while a commit runs are
written together by the next one; ``compact_after`` compacts once small fragments pile up),
and ``/count`` and scans pick up commits by other writers with ``checkout_latest``. Its load
test, against the same service on pylance: ``benchmarks/service_load.py`` (figures in the
README).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
from aiohttp import web

import alance

#: Compact once this many small fragments exist (the opt-in auto-compaction of ``insert``).
COMPACT_AFTER = 8


async def stream_ndjson(request: web.Request, first: pa.RecordBatch | None,
                        next_batch: Callable[[], Awaitable[pa.RecordBatch | None]],
                        ) -> web.StreamResponse:
    """Stream ``first`` and the batches ``next_batch()`` gives (until ``None``) as NDJSON."""
    response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
    await response.prepare(request)
    batch = first
    while batch is not None:
        lines = "".join(json.dumps(row, default=str) + "\n" for row in batch.to_pylist())
        await response.write(lines.encode())
        batch = await next_batch()
    await response.write_eof()
    return response


class Service:
    """The request handlers around one dataset handle."""

    def __init__(self, ds: alance.LanceDataset) -> None:
        self.ds = ds
        self.inserter = alance.BatchedInserter(ds, compact_after=COMPACT_AFTER)

    async def fresh(self) -> alance.LanceDataset:
        self.ds = await self.ds.checkout_latest()
        return self.ds

    async def count(self, request: web.Request) -> web.Response:
        ds = await self.fresh()
        return web.json_response({"version": ds.version, "rows": await ds.count_rows()})

    async def take(self, request: web.Request) -> web.Response:
        try:
            rows = [int(x) for x in request.query.get("rows", "").split(",") if x]
            table = await self.ds.take(rows)
        except (ValueError, alance.InvalidInputError) as exc:
            raise web.HTTPBadRequest(text=str(exc)) from exc
        return web.json_response(table.to_pylist())

    async def scan(self, request: web.Request) -> web.StreamResponse:
        ds = await self.fresh()
        limit = int(request.query["limit"]) if "limit" in request.query else None
        try:
            batches = ds.scan(filter=request.query.get("filter"), limit=limit, batch_size=1024)
            first = await anext(batches, None)
        except alance.InvalidInputError as exc:
            raise web.HTTPBadRequest(text=str(exc)) from exc
        return await stream_ndjson(request, first, lambda: anext(batches, None))

    async def append(self, request: web.Request) -> web.Response:
        rows: Any = await request.json()
        if not isinstance(rows, list) or not rows:
            raise web.HTTPBadRequest(text="expected a non-empty JSON list of rows")
        try:
            table = pa.Table.from_pylist(rows, schema=self.ds.schema)
            written = await self.inserter.insert(table)
        except (alance.InvalidInputError, pa.ArrowException) as exc:
            raise web.HTTPBadRequest(text=str(exc)) from exc
        if written.version > self.ds.version:
            self.ds = written
        return web.json_response({"version": written.version,
                                  "fragments": len(written.get_fragments())})


async def make_app(uri: str) -> web.Application:
    """The aiohttp application serving the dataset at ``uri`` (created if missing)."""
    try:
        ds = await alance.open_dataset(uri)
    except alance.DatasetNotFoundError:
        ds = await alance.write_dataset(
            pa.table({"id": pa.array(range(100), pa.int64()),
                      "name": [f"row {i}" for i in range(100)]}), uri)
    service = Service(ds)
    app = web.Application()
    app.add_routes([web.get("/count", service.count), web.get("/take", service.take),
                    web.get("/scan", service.scan), web.post("/append", service.append)])
    gc.freeze()  # objects made at startup stay out of full collections (see README)
    return app


async def selftest(uri: str) -> None:
    """Start the service on a free port, call every endpoint, check the answers, stop."""
    from aiohttp import ClientSession

    runner = web.AppRunner(await make_app(uri))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    base = f"http://127.0.0.1:{port}"
    try:
        async with ClientSession() as http:
            async with http.get(f"{base}/count") as r:
                before = (await r.json())["rows"]
            async with http.get(f"{base}/take", params={"rows": "0,7"}) as r:
                took = await r.json()
            assert [row["id"] for row in took] == [0, 7], took
            async with http.get(f"{base}/scan", params={"filter": "id < 3"}) as r:
                streamed = [json.loads(line) for line in (await r.text()).splitlines()]
            assert [row["id"] for row in streamed] == [0, 1, 2], streamed
            for n in range(COMPACT_AFTER + 1):  # enough small appends to compact once
                rows = [{"id": 1000 + n, "name": f"appended {n}"}]
                async with http.post(f"{base}/append", json=rows) as r:
                    appended = await r.json()
            async with http.get(f"{base}/count") as r:
                after = (await r.json())["rows"]
            assert after == before + COMPACT_AFTER + 1, (before, after)
            async with http.get(f"{base}/scan", params={"filter": "bad syntax ((("}) as r:
                assert r.status == 400
        print(f"selftest ok: {before} -> {after} rows, version {appended['version']}, "
              f"{appended['fragments']} fragments after auto-compaction")
    finally:
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uri", default=None, help="dataset URI (default: a temp dir)")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--selftest", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        uri = args.uri or str(Path(tmp) / "service.lance")
        if args.selftest:
            asyncio.run(selftest(uri))
        else:
            web.run_app(make_app(uri), host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
