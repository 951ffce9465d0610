"""Load test of examples/service.py over HTTP: alance vs the same service on pylance in threads.

    python benchmarks/service_load.py [--rows 200000] [--clients 64] [--seconds 20]
                                      [--rounds 2] [--mix take=80,scan=15,append=5]
                                      [--threads 32]

pylance writes one table of ``--rows`` rows (int64 ``id``, a ~20-character string ``name``,
float64 ``score``) twice: one copy per service, identical bytes. Two services serve the same
endpoints (``GET /take?rows=``, ``GET /scan?filter=&limit=`` streamed as NDJSON, ``POST
/append``, ``GET /count``) from a separate server process each:

* **alance**: ``examples/service.py`` itself (one :class:`alance.LanceDataset` handle awaited
  on the event loop; ``checkout_latest`` before scans; appends through
  ``alance.BatchedInserter(ds, compact_after=8)``: group commit, and tiered auto-compaction
  that never rewrites the large base fragment for a few small ones);
* **pylance**: the same aiohttp handlers with every pylance call in a ``ThreadPoolExecutor``
  of ``--threads`` threads via ``run_in_executor`` (how an async service uses pylance):
  ``take``, ``to_batches`` pulled batch by batch, ``checkout_latest`` before scans, appends
  serialised by a lock: ``lance.write_dataset(mode="append")`` then
  ``optimize.compact_files()`` once 8 small fragments exist (pylance's compaction, which
  merges every small fragment, the base one included);
* **pylance-gc** (with ``--pylance-group-commit``): the pylance service with the same group
  commit built by hand (appends waiting while a commit runs are written by the next one).

Both encode JSON the same way (the example's code). Before anything is timed, both services
are asked the same takes, scans and count and must answer byte for byte alike.

The driver (this process) runs ``--clients`` concurrent aiohttp clients; each picks an
operation at random by ``--mix`` (seeded, so both engines see the same sequence), sends it,
reads the whole response (scans: every streamed line) and records the latency. Takes ask for 10
random row positions of the original rows; scans ``id >= N AND id < N + 200`` (200 rows,
streamed in batches); appends post 10 rows. One server runs at a time; rounds alternate
engines (alance, pylance, alance, ...) so drift of the shared machine hits both. Reported per
engine over all rounds: requests/s, p50 and p99 latency per operation and overall, and errors
(any non-200 answer). The driver shares the 2 cores with the server: absolute figures are the
pair's, compare the two engines within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

COMPACT_AFTER = 8
SMALL_FRAGMENT_ROWS = 1_048_576
SCAN_SPAN = 200
TAKE_ROWS = 10
APPEND_ROWS = 10


# -- the pylance service (same endpoints, pylance calls in a thread pool) -----------------------
class PylanceService:
    """examples/service.py's handlers with pylance underneath, run in a thread pool."""

    def __init__(self, uri: str, threads: int, group_commit: bool = False) -> None:
        import lance

        self.lance = lance
        self.uri = uri
        self.ds = lance.dataset(uri)
        self.pool = ThreadPoolExecutor(threads)
        self.write_lock = asyncio.Lock()
        # Group commit built by hand (what alance.BatchedInserter does): appends waiting
        # while a commit runs are written together by the next one.
        self.group_commit = group_commit
        self.waiting: list[tuple[list[dict[str, Any]], asyncio.Future[Any]]] = []
        self.flusher: asyncio.Task[None] | None = None

    async def run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    async def fresh(self) -> Any:
        # pylance's checkout_latest() changes the handle in place and fails ("Already
        # borrowed") while other threads read through it: swap in a new handle instead.
        ds = self.ds
        latest = await self.run(lambda: ds.latest_version)
        if latest != ds.version:
            ds = await self.run(ds.checkout_version, latest)
            if ds.version > self.ds.version:
                self.ds = ds
        return self.ds

    async def count(self, request: Any) -> Any:
        from aiohttp import web

        ds = await self.fresh()
        return web.json_response({"version": ds.version, "rows": await self.run(ds.count_rows)})

    async def take(self, request: Any) -> Any:
        from aiohttp import web

        try:
            rows = [int(x) for x in request.query.get("rows", "").split(",") if x]
            table = await self.run(self.ds.take, rows)
        except (ValueError, OSError) as exc:
            raise web.HTTPBadRequest(text=str(exc)) from exc
        return web.json_response(table.to_pylist())

    async def scan(self, request: Any) -> Any:
        from aiohttp import web

        ds = await self.fresh()
        limit = int(request.query["limit"]) if "limit" in request.query else None
        try:
            batches = await self.run(lambda: iter(ds.to_batches(
                filter=request.query.get("filter"), limit=limit, batch_size=1024)))
            first = await self.run(next, batches, None)
        except (ValueError, OSError) as exc:
            raise web.HTTPBadRequest(text=str(exc)) from exc
        from examples.service import stream_ndjson

        return await stream_ndjson(request, first, lambda: self.run(next, batches, None))

    def _append(self, rows: list[dict[str, Any]]) -> Any:
        import pyarrow as pa

        table = pa.Table.from_pylist(rows, schema=self.ds.schema)
        ds = self.lance.write_dataset(table, self.uri, mode="append")
        small = sum(1 for f in ds.get_fragments() if f.count_rows() < SMALL_FRAGMENT_ROWS)
        if small >= COMPACT_AFTER:
            ds.optimize.compact_files()
        self.ds = self.lance.dataset(self.uri)
        return self.ds

    async def append(self, request: Any) -> Any:
        from aiohttp import web

        rows: Any = await request.json()
        if not isinstance(rows, list) or not rows:
            raise web.HTTPBadRequest(text="expected a non-empty JSON list of rows")
        if self.group_commit:
            fut = asyncio.get_running_loop().create_future()
            self.waiting.append((rows, fut))
            if self.flusher is None:
                self.flusher = asyncio.get_running_loop().create_task(self._flush())
            ds = await fut
        else:
            async with self.write_lock:
                ds = await self.run(self._append, rows)
        return web.json_response({"version": ds.version, "fragments": len(ds.get_fragments())})

    async def _flush(self) -> None:
        try:
            while self.waiting:
                batch, self.waiting = self.waiting, []
                try:
                    ds = await self.run(self._append, [r for rows, _ in batch for r in rows])
                except Exception as exc:  # every caller of the batch sees it
                    for _, fut in batch:
                        fut.set_exception(exc)
                    continue
                for _, fut in batch:
                    fut.set_result(ds)
        finally:
            self.flusher = None


async def serve(engine: str, uri: str, threads: int) -> None:
    """Run one service on a free port; print ``PORT n``; stop when stdin closes."""
    from aiohttp import web

    if engine == "alance":
        from examples.service import make_app

        app = await make_app(uri)
    else:
        service = PylanceService(uri, threads, group_commit=engine == "pylance-gc")
        app = web.Application()
        app.add_routes([web.get("/count", service.count), web.get("/take", service.take),
                        web.get("/scan", service.scan), web.post("/append", service.append)])
        gc.freeze()  # as examples/service.py does
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(f"PORT {runner.addresses[0][1]}", flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)  # the driver closes our stdin to stop us
    await runner.cleanup()


# -- the driver ----------------------------------------------------------------------------------
class Server:
    """A service in its own process."""

    def __init__(self, engine: str, uri: str, threads: int, log: Any = None) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", engine, "--uri", uri, "--threads",
             str(threads)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
            text=True, env=env)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("PORT "):
            self.stop()
            raise SystemExit(f"{engine} service failed to start: {line!r}")
        self.base = f"http://127.0.0.1:{int(line.split()[1])}"

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def make_table(rows: int) -> Any:
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(5)
    return pa.table({"id": pa.array(np.arange(rows, dtype=np.int64)),
                     "name": [f"user-{i:08d}-{i % 97:02d}" for i in range(rows)],
                     "score": pa.array(rng.random(rows))})


class Workload:
    """The seeded sequence of requests (the same for both engines in a round)."""

    def __init__(self, seed: int, rows: int, mix: dict[str, int]) -> None:
        self.rng = random.Random(seed)
        self.rows = rows
        self.ops = [op for op, weight in mix.items() for _ in range(weight)]
        self.appended = 0

    def next(self) -> tuple[str, str, dict[str, str], Any]:
        op = self.rng.choice(self.ops)
        if op == "take":
            picked = sorted(self.rng.sample(range(self.rows), TAKE_ROWS))
            return op, "/take", {"rows": ",".join(map(str, picked))}, None
        if op == "scan":
            low = self.rng.randrange(self.rows - SCAN_SPAN)
            return op, "/scan", {"filter": f"id >= {low} AND id < {low + SCAN_SPAN}"}, None
        base = 10_000_000_000 + self.appended
        self.appended += APPEND_ROWS
        rows = [{"id": base + i, "name": f"appended-{base + i}", "score": 0.5}
                for i in range(APPEND_ROWS)]
        return op, "/append", {}, rows


async def check_same(bases: dict[str, str], rows: int) -> None:
    """Both services answer the same requests with the same bytes."""
    from aiohttp import ClientSession

    rng = random.Random(1)
    probes: list[tuple[str, dict[str, str]]] = [("/count", {})]
    for _ in range(5):
        picked = sorted(rng.sample(range(rows), TAKE_ROWS))
        probes.append(("/take", {"rows": ",".join(map(str, picked))}))
        low = rng.randrange(rows - SCAN_SPAN)
        probes.append(("/scan", {"filter": f"id >= {low} AND id < {low + SCAN_SPAN}"}))
    probes.append(("/scan", {"filter": "id < 3000", "limit": "2500"}))
    async with ClientSession() as http:
        for path, params in probes:
            answers = {}
            for engine, base in bases.items():
                async with http.get(base + path, params=params) as r:
                    answers[engine] = (r.status, await r.read())
            if len(set(answers.values())) != 1:
                raise SystemExit(f"{path} {params}: the services disagree; not timing "
                                 f"({ {e: (a[0], a[1][:200]) for e, a in answers.items()} })")


async def drive(base: str, clients: int, seconds: float, work: Workload,
                warmup: float) -> tuple[dict[str, list[float]], int, int, float]:
    """``clients`` concurrent clients for ``seconds`` (after ``warmup``)."""
    from aiohttp import ClientSession, ClientTimeout, TCPConnector

    latencies: dict[str, list[float]] = defaultdict(list)
    errors = 0
    done = 0
    loop = asyncio.get_running_loop()
    start = loop.time()
    measure_from = start + warmup
    stop_at = measure_from + seconds

    async def client(http: ClientSession) -> None:
        nonlocal errors, done
        while loop.time() < stop_at:
            op, path, params, body = work.next()
            t0 = time.perf_counter()
            if body is None:
                request = http.get(base + path, params=params)
            else:
                request = http.post(base + path, json=body)
            async with request as r:
                async for _ in r.content.iter_chunked(1 << 16):
                    pass
                ok = r.status == 200
            elapsed = time.perf_counter() - t0
            if loop.time() - elapsed >= measure_from and loop.time() <= stop_at:
                done += 1
                if ok:
                    latencies[op].append(elapsed)
                else:
                    errors += 1

    connector = TCPConnector(limit=clients)
    async with ClientSession(connector=connector, timeout=ClientTimeout(total=120)) as http:
        await asyncio.gather(*(client(http) for _ in range(clients)))
    return latencies, done, errors, seconds


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(args: argparse.Namespace) -> None:
    import lance

    mix = {k: int(v) for k, v in (part.split("=") for part in args.mix.split(","))}
    table = make_table(args.rows)
    engines = ("alance", "pylance", "pylance-gc") if args.pylance_group_commit else (
        "alance", "pylance")
    results: dict[str, dict[str, Any]] = {
        e: {"lat": defaultdict(list), "done": 0, "errors": 0, "seconds": 0.0} for e in engines}
    with tempfile.TemporaryDirectory(prefix="alance-service-load-") as tmp:
        uris = {}
        for engine in engines:
            uris[engine] = str(Path(tmp) / f"{engine}.lance")
            lance.write_dataset(table, uris[engine])
        logs = {e: open(Path(tmp) / f"{e}.log", "a") for e in engines}  # noqa: SIM115
        servers = {e: Server(e, uris[e], args.threads, logs[e]) for e in engines}
        try:
            await check_same({e: s.base for e, s in servers.items()}, args.rows)
        finally:
            for s in servers.values():
                s.stop()
        print(f"both services answer alike; {args.clients} clients, mix {mix}, "
              f"{args.rounds} rounds of {args.seconds:g} s per engine", flush=True)
        for round_no in range(args.rounds):
            for engine in engines:
                server = Server(engine, uris[engine], args.threads, logs[engine])
                try:
                    work = Workload(100 + round_no, args.rows, mix)
                    lat, done, errors, secs = await drive(server.base, args.clients,
                                                          args.seconds, work, args.warmup)
                finally:
                    server.stop()
                res = results[engine]
                for op, values in lat.items():
                    res["lat"][op].extend(values)
                res["done"] += done
                res["errors"] += errors
                res["seconds"] += secs
                print(f"  round {round_no + 1} {engine:<8} {done / secs:8.0f} req/s "
                      f"({errors} errors)", flush=True)
        for engine, log in logs.items():
            log.close()
            text = (Path(tmp) / f"{engine}.log").read_text()
            if text.strip():
                print(f"{engine} service stderr (last 2000 characters):\n{text[-2000:]}")
    print()
    ops = [op for op in ("take", "scan", "append") if op in mix]
    header = f"  {'engine':<22} {'req/s':>7} {'p50 ms':>7} {'p99 ms':>7}"
    for op in ops:
        header += f" {op + ' p50/p99':>18}"
    print(header + f" {'errors':>7}")
    for engine in engines:
        res = results[engine]
        everything = [v for values in res["lat"].values() for v in values]
        label = {"alance": "alance (event loop)", "pylance": f"pylance ({args.threads} thr)",
                 "pylance-gc": "pylance + group commit"}[engine]
        line = (f"  {label:<22} {res['done'] / res['seconds']:>7.0f} "
                f"{pct(everything, .5) * 1e3:>7.1f} {pct(everything, .99) * 1e3:>7.1f}")
        for op in ops:
            values = res["lat"][op]
            line += f" {pct(values, .5) * 1e3:>8.1f}/{pct(values, .99) * 1e3:<9.1f}"
        print(line + f" {res['errors']:>7}")
    for other in engines[1:]:
        ratio = (results["alance"]["done"] / results["alance"]["seconds"]) / (
            results[other]["done"] / results[other]["seconds"])
        print(f"  alance / {other} throughput: {ratio:.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--seconds", type=float, default=20.0, help="measured seconds per round")
    p.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds per round")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--mix", default="take=80,scan=15,append=5")
    p.add_argument("--threads", type=int, default=32, help="pylance's thread pool")
    p.add_argument("--pylance-group-commit", action="store_true",
                   help="also run pylance with group commit built by hand (as alance's "
                        "BatchedInserter does)")
    p.add_argument("--serve", choices=("alance", "pylance", "pylance-gc"),
                   help=argparse.SUPPRESS)
    p.add_argument("--uri", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        asyncio.run(serve(args.serve, args.uri, args.threads))
        return
    import lance

    print(f"pylance {lance.__version__}; {args.rows:,} rows")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
