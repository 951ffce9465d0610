"""The blocking facade :mod:`alance.sync`: threads, running loops, fork, early exit, pickling."""

from __future__ import annotations

import asyncio
import gc
import inspect
import os
import pickle
import select
import subprocess
import sys
import threading
import warnings
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import alance
from alance import _loop
from alance import sync as al

N_ROWS = 5000


def make_table(n: int = N_ROWS, start: int = 0) -> pa.Table:
    ids = pa.array(range(start, start + n), pa.int64())
    return pa.table({"id": ids, "x": pa.array([float(i) / 2 for i in range(start, start + n)]),
                     "s": pa.array([f"s{i:06d}" for i in range(start, start + n)])})


@pytest.fixture
def written(local_uri: str) -> tuple[str, pa.Table]:
    """A local dataset of N_ROWS rows in several files and row groups, and its table."""
    table = make_table()
    al.write_dataset(table, local_uri, max_rows_per_file=2000, max_rows_per_group=500)
    return local_uri, table


def _tasks_on_background_loop() -> int:
    async def count() -> int:
        return len(asyncio.all_tasks()) - 1  # minus this probe

    return _loop.run(count())


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


# -- threads -------------------------------------------------------------------------------------


def test_many_threads_read_at_once(written: tuple[str, pa.Table]) -> None:
    uri, table = written
    shared = al.open_dataset(uri)  # one object used from every thread, plus per-thread opens
    barrier = threading.Barrier(8)

    def work(i: int) -> None:
        barrier.wait()
        ds = shared if i % 2 else al.open_dataset(uri)
        assert ds.to_table().equals(table)
        assert ds.count_rows() == N_ROWS
        assert ds.count_rows(filter=f"id < {i * 100}") == i * 100
        idx = [N_ROWS - 1 - i, i, 2500 + i]
        assert ds.take(idx).equals(table.take(idx))
        got = pa.Table.from_batches(list(ds.scan(columns=["id"], batch_size=700)))
        assert got.column("id").equals(table.column("id"))

    with ThreadPoolExecutor(8) as pool:
        for fut in [pool.submit(work, i) for i in range(8)]:
            fut.result(timeout=60)


def test_many_threads_append_at_once(local_uri: str) -> None:
    al.write_dataset(make_table(10), local_uri)
    barrier = threading.Barrier(6)

    def append(i: int) -> int:
        barrier.wait()
        return al.write_dataset(make_table(10, start=1000 * (i + 1)), local_uri,
                                mode="append").version

    with ThreadPoolExecutor(6) as pool:
        versions = list(pool.map(append, range(6), timeout=60))
    assert sorted(versions) == list(range(2, 8))
    ds = al.open_dataset(local_uri)
    assert ds.version == 7
    ids = ds.to_table(columns=["id"]).column("id").to_pylist()
    want = set(range(10)) | {1000 * (i + 1) + j for i in range(6) for j in range(10)}
    assert len(ids) == len(want) and set(ids) == want


# -- inside a running event loop ----------------------------------------------------------------


async def test_blocking_calls_inside_running_loop(local_uri: str) -> None:
    """Code that already runs a loop (Jupyter, async frameworks) can still use alance.sync."""
    running = asyncio.get_running_loop()
    table = make_table(1000)
    ds = al.write_dataset(table, local_uri)
    assert al.open_dataset(local_uri).to_table().equals(table)
    assert ds.take([3, 999]).equals(table.take([3, 999]))
    assert sum(b.num_rows for b in ds.scan(batch_size=100)) == 1000
    assert _loop.loop() is not running
    # the caller's loop is still healthy, and the async API works side by side
    await asyncio.sleep(0)
    async_ds = await alance.open_dataset(local_uri)
    assert (await async_ds.to_table()).equals(table)


def test_sync_from_alance_loop_thread_fails_fast(tmp_path: Path) -> None:
    """A sync call made on alance's own loop thread must raise, not deadlock."""
    other = str(tmp_path / "other.lance")
    al.write_dataset(make_table(10), other)

    async def source() -> AsyncIterator[pa.RecordBatch]:
        al.open_dataset(other)  # runs on the background loop thread: would wait on itself
        yield make_table(10).to_batches()[0]

    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            al.write_dataset(source(), str(tmp_path / "new.lance"))
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout=20)
    assert not t.is_alive(), "alance.sync deadlocked when called from its own loop thread"
    assert isinstance(outcome[0], RuntimeError), outcome
    assert not (tmp_path / "new.lance" / "_versions").exists()


# -- fork ------------------------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore:lance is not fork-safe:UserWarning")  # pylance's, not ours
def test_use_after_fork(written: tuple[str, pa.Table]) -> None:
    uri, table = written
    ds = al.open_dataset(uri)  # the parent uses the facade: loop thread + store runtime exist
    assert ds.to_table().equals(table)
    assert _loop._thread is not None and _loop._thread.is_alive()

    r, w = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # "fork() with threads" on 3.12+
        pid = os.fork()
    if pid == 0:  # child: never return into pytest
        code = 1
        try:
            os.close(r)
            child = al.open_dataset(uri)
            ok = child.to_table().equals(table) and ds.count_rows(filter="id < 10") == 10
            new = al.write_dataset(make_table(7, start=10_000), uri, mode="append")
            ok = ok and new.version == 2 and new.count_rows() == N_ROWS + 7
            os.write(w, b"ok" if ok else b"wrong result")
            code = 0 if ok else 1
        except BaseException as exc:
            os.write(w, repr(exc).encode()[:4000])
        finally:
            os._exit(code)

    os.close(w)
    try:
        ready, _, _ = select.select([r], [], [], 15)
        if not ready:
            os.kill(pid, 9)
            pytest.fail("the forked child hung using alance.sync")
        message = os.read(r, 4096).decode()
    finally:
        os.close(r)
    _, status = os.waitpid(pid, 0)
    assert message == "ok" and os.waitstatus_to_exitcode(status) == 0, message
    # the parent still works and sees the child's commit
    again = al.open_dataset(uri)
    assert again.version == 2 and again.count_rows() == N_ROWS + 7
    assert ds.to_table().equals(table)  # the old object still reads its own version


# -- early exit from iteration -----------------------------------------------------------------


def test_scan_break_leaks_nothing(written: tuple[str, pa.Table]) -> None:
    uri, _ = written
    ds = al.open_dataset(uri)
    for _ in range(3):  # warm up: loop thread, store runtime threads, caches
        for _batch in ds.scan(batch_size=100):
            break
    gc.collect()
    threads, fds = threading.active_count(), _open_fds()
    assert _tasks_on_background_loop() == 0

    for i in range(100):
        it = ds.scan(batch_size=50 + i, filter="id >= 0" if i % 2 else None)
        first = next(it)
        assert first.num_rows > 0
        for _batch in it:
            break
        del it
        for _batch in ds.scanner(columns=["id"], batch_size=100).to_batches():
            break
    gc.collect()
    assert _tasks_on_background_loop() == 0, "scan tasks left running after break"
    assert threading.active_count() <= threads, "threads leaked"
    assert _open_fds() <= fds + 2, "file descriptors leaked"
    # and the loop is still usable
    assert ds.count_rows() == N_ROWS


# -- pickling --------------------------------------------------------------------------------------


def test_pickle_sync_dataset(written: tuple[str, pa.Table]) -> None:
    uri, _ = written
    al.write_dataset(make_table(5, start=50_000), uri, mode="append")
    latest = al.open_dataset(uri)
    old = latest.checkout_version(1)

    for ds, rows in ((latest, N_ROWS + 5), (old, N_ROWS)):
        back = pickle.loads(pickle.dumps(ds))
        assert isinstance(back, al.LanceDataset)
        assert (back.uri, back.version) == (ds.uri, ds.version)
        assert back.count_rows() == rows
        assert back.to_table().equals(ds.to_table())

    # the async object pickles too, and comes back as an async object of the same version
    async_old = pickle.loads(pickle.dumps(old._async))
    assert isinstance(async_old, alance.LanceDataset) and async_old.version == 1

    # and in another process (what Spark does with a dataset captured in a closure)
    repo = str(Path(alance.__file__).resolve().parent.parent)
    code = ("import pickle, sys; ds = pickle.loads(sys.stdin.buffer.read()); "
            "print(type(ds).__module__, ds.version, ds.count_rows(), "
            "ds.to_table().column('id').to_pylist()[-1])")
    out = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(old),
                         capture_output=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=repo))
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.decode().split() == ["alance.sync.dataset", "1", str(N_ROWS),
                                           str(N_ROWS - 1)]


# -- the facade mirrors the async API ----------------------------------------------------------


#: Awaited methods of the async API that the blocking facade offers as properties, as pylance
#: does (``ds.latest_version``).
SYNC_PROPERTIES = {"latest_version"}


def _public(cls: type) -> dict[str, object]:
    return {n: inspect.getattr_static(cls, n) for n in dir(cls) if not n.startswith("_")}


@pytest.mark.parametrize(("async_cls", "sync_cls"), [
    (alance.LanceDataset, al.LanceDataset),
    (alance.Scanner, al.Scanner),
])
def test_sync_mirrors_async_classes(async_cls: type, sync_cls: type) -> None:
    theirs, ours = _public(async_cls), _public(sync_cls)
    missing = sorted(set(theirs) - set(ours))
    assert not missing, f"alance.sync.{sync_cls.__name__} lacks {missing}"
    for name, attr in theirs.items():
        mine = ours[name]
        if name in SYNC_PROPERTIES:  # pylance's form: a property on the blocking object
            assert isinstance(mine, property), name
            continue
        assert isinstance(mine, property) == isinstance(attr, property), name
        if isinstance(attr, property):
            continue
        assert callable(mine), name
        assert not inspect.iscoroutinefunction(mine), f"sync {name} is a coroutine function"
        assert not inspect.isasyncgenfunction(mine), name
        _check_parameters(attr, mine, f"{sync_cls.__name__}.{name}")


def _check_parameters(async_fn: object, sync_fn: object, what: str) -> None:
    """Every parameter of the async callable is accepted by the sync one, in the same place."""
    a = inspect.signature(async_fn)  # type: ignore[arg-type]
    s = inspect.signature(sync_fn)  # type: ignore[arg-type]
    s_params = s.parameters
    var_kw = any(p.kind is p.VAR_KEYWORD for p in s_params.values())
    positional = [n for n, p in s_params.items()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for i, (name, p) in enumerate(a.parameters.items()):
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            assert i < len(positional) and positional[i] == name, \
                f"{what}: positional parameter {name!r} differs"
        else:
            assert name in s_params or var_kw, f"{what}: keyword {name!r} not accepted"


def test_sync_mirrors_async_module() -> None:
    functions = {n for n in alance.__all__
                 if inspect.isfunction(getattr(alance, n)) and not n.startswith("_")}
    assert {"open_dataset", "write_dataset"} <= functions
    for name in functions:
        assert hasattr(al, name), f"alance.sync lacks {name}"
        fn = getattr(al, name)
        assert not inspect.iscoroutinefunction(fn), name
        _check_parameters(getattr(alance, name), fn, name)
    for name in ("LanceDataset", "Scanner"):
        assert name in al.__all__


def test_committing_calls_move_the_object_as_in_pylance(tmp_path: Path) -> None:
    """alance.sync follows pylance: a call that commits moves the dataset object to the new
    version (and returns pylance's counts); checkout_version gives another object; the async
    API keeps returning new immutable versions."""
    import lance

    uri = str(tmp_path / "ds")
    table = pa.table({"id": pa.array(range(10), pa.int64()), "v": pa.array(range(10))})
    ours = al.write_dataset(table, uri)
    theirs_uri = str(tmp_path / "theirs")
    theirs = lance.write_dataset(table, theirs_uri)
    for ds in (ours, theirs):
        counts = ds.delete("id < 3")
        assert counts["num_deleted_rows"] == 3
        assert ds.version == 2 and ds.count_rows() == 7
        assert ds.update({"v": "v + 100"}, where="id = 5")["num_rows_updated"] == 1
        assert ds.version == 3
        result = (ds.merge_insert("id").when_matched_update_all()
                  .when_not_matched_insert_all()
                  .execute(pa.table({"id": pa.array([5, 42], pa.int64()),
                                     "v": pa.array([7, 8])})))
        assert result["num_inserted_rows"] == 1 and result["num_updated_rows"] == 1
        assert ds.version == 4 and ds.count_rows() == 8
        ds.add_columns({"w": "v * 2"})
        assert ds.version == 5 and "w" in ds.schema.names
        ds.drop_columns(["w"])
        assert ds.version == 6 and ds.schema.names == ["id", "v"]
        old = ds.checkout_version(2)
        assert old.version == 2 and ds.version == 6
    assert ours.to_table().sort_by("id").equals(theirs.to_table().sort_by("id"))
    ours.restore(2)
    assert ours.version == 7 and ours.count_rows() == 7

    async def immutable() -> None:
        ds = await alance.open_dataset(uri)
        before = ds.version
        result = await ds.delete("id = 9")
        assert ds.version == before and result.dataset.version == before + 1

    asyncio.run(immutable())


def test_pylance_dataset_arguments(tmp_path: Path) -> None:
    """``alance.sync.dataset`` takes pylance's arguments: asof, commit_lock, cache hints."""
    import contextlib
    import time
    from datetime import datetime

    uri = str(tmp_path / "ds")
    held: list[int] = []

    @contextlib.contextmanager
    def lock(version: int) -> Any:
        held.append(version)
        yield

    al.write_dataset(make_table(10), uri, commit_lock=lock)
    assert held == [1]
    time.sleep(0.05)
    between = datetime.now()
    time.sleep(0.05)
    ds = al.dataset(uri, commit_lock=lock, block_size=4096, index_cache_size=10)
    ds.delete("id < 3")
    assert held == [1, 2] and ds.version == 2
    assert al.dataset(uri, asof=between).version == 1
    assert al.dataset(uri, asof=between.isoformat()).version == 1
    assert al.dataset(uri, asof=datetime.now()).version == 2
    with pytest.raises(alance.NotFoundError):
        al.dataset(uri, asof=datetime(2000, 1, 1))

    @contextlib.contextmanager
    def refuse(version: int) -> Any:
        raise alance.CommitConflictError("held elsewhere")
        yield

    with pytest.raises(alance.CommitConflictError):
        al.dataset(uri, commit_lock=refuse).delete("id < 5")
    assert al.dataset(uri).version == 2  # nothing committed
    with pytest.raises(alance.InvalidInputError):
        al.dataset(uri, no_such_option=1)
