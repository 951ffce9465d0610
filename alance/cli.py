"""The ``alance`` command: inspect, scan and maintain Lance datasets from a shell.

    alance inspect URI                  schema, versions, fragments, files, flags, sizes
    alance versions URI                 every version with its time and operation
    alance scan URI --limit 10 --columns a,b --filter "a > 3"
    alance write URI SOURCE [--mode append]  from Parquet, CSV, Arrow IPC or JSON
    alance compact URI [--target-rows-per-fragment N ...]
    alance cleanup URI --older-than 7d [--dry-run]
    alance restore URI VERSION
    alance tag create|update URI NAME VERSION / tag list URI / tag delete URI NAME

Every command takes ``--json`` (machine-readable output on stdout) and repeatable
``--storage-option key=value``. Human output is rich tables; long operations (write, compact,
cleanup) show a progress bar on a terminal, or plain progress lines on stderr with
``--progress`` when stderr is not a terminal. Errors go to stderr with exit status 1 (2 for
bad arguments).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime as dt
import json
import re
import sys
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeRemainingColumn
from rich.table import Table

from alance.commit.handler import ManifestLocation
from alance.dataset.api import LanceDataset, open_dataset, write_dataset
from alance.dataset.fragments.read import live_rows
from alance.dataset.versions.cleanup import index_uuid, manifest_time
from alance.dataset.versions.snapshot import Snapshot, load_snapshot_at
from alance.errors import AlanceError, InvalidInputError
from alance.format.feature_flags import describe_flags
from alance.format.manifest import writer_version_string
from alance.transaction.operations import operation_name

#: Directories whose objects ``inspect`` counts.
STORAGE_DIRS = ("data", "_versions", "_deletions", "_transactions", "_indices", "_refs")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(w|d|h|m|s)")
_UNITS = {"w": "weeks", "d": "days", "h": "hours", "m": "minutes", "s": "seconds"}


def parse_duration(text: str) -> dt.timedelta:
    """``"7d"``, ``"12h"``, ``"1d12h"``, ``"90s"``, ``"2w"`` or ``"0"`` as a timedelta."""
    text = text.strip().lower()
    if text == "0":
        return dt.timedelta(0)
    pos, total = 0, dt.timedelta(0)
    for m in _DURATION.finditer(text):
        if text[pos:m.start()].strip():
            break
        total += dt.timedelta(**{_UNITS[m.group(2)]: float(m.group(1))})
        pos = m.end()
    if pos == 0 or text[pos:].strip():
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 7d, 12h, 1d12h, 0)")
    return total


def _storage_options(pairs: Sequence[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidInputError(f"--storage-option expects key=value, got {pair!r}")
        out[key] = value
    return out


def _version_arg(text: str) -> int | str:
    return int(text) if text.isdigit() else text


def _jsonable(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


class _TextProgress:
    """Plain progress lines on stderr (``--progress`` without a terminal): one per tenth of
    the work, or per update when the total is unknown. The subset of rich's ``Progress``
    the commands use."""

    def __init__(self, description: str) -> None:
        self.description = description
        self._shown = -1

    def __enter__(self) -> _TextProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def add_task(self, description: str, total: float | None = None) -> TaskID:
        return TaskID(0)

    def update(self, task: TaskID, *, completed: float, total: float | None = None) -> None:
        if total:
            step = int(10 * completed / total)
            if step == self._shown:
                return
            self._shown = step
            share = 100 * completed / total
            line = f"{self.description}: {completed:.0f}/{total:.0f} ({share:.0f}%)"
        else:
            line = f"{self.description}: {completed:.0f}"
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


class _Output:
    def __init__(self, as_json: bool, force_progress: bool = False) -> None:
        self.as_json = as_json
        self.force_progress = force_progress
        self.console = Console(highlight=False)
        self.err = Console(stderr=True, highlight=False)

    def emit(self, data: Any, *renderables: Any) -> None:
        if self.as_json:
            sys.stdout.write(json.dumps(_jsonable(data), indent=2) + "\n")
        else:
            for item in renderables:
                self.console.print(item)

    def progress(self, description: str) -> Progress | _TextProgress | None:
        if self.err.is_terminal and not self.as_json:
            pass
        elif self.force_progress:
            return _TextProgress(description)
        else:
            return None
        return Progress(TextColumn(description), BarColumn(),
                        TextColumn("{task.percentage:>3.0f}%"), TimeRemainingColumn(),
                        console=self.err, transient=True)


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> Table:
    table = Table(title=title, title_justify="left")
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*("" if v is None else str(v) for v in row))
    return table


# -- commands ---------------------------------------------------------------------------------

async def _open(args: argparse.Namespace, version: int | str | None = None) -> LanceDataset:
    return await open_dataset(args.uri, version, storage_options=args.storage_options)


async def cmd_inspect(args: argparse.Namespace, out: _Output) -> None:
    ds = await _open(args, args.version)
    m = ds.manifest
    fragments: list[dict[str, Any]] = []
    for frag in ds.fragment_protos():
        files = [{"path": f.path, "fields": list(f.fields), "size": int(f.file_size_bytes),
                  "version": f"{f.file_major_version}.{f.file_minor_version}"}
                 for f in frag.files]
        fragments.append({"id": int(frag.id), "physical_rows": int(frag.physical_rows),
                          "deleted_rows": int(frag.physical_rows) - live_rows(frag),
                          "files": files, "bytes": sum(f["size"] for f in files),
                          "deletion_file": frag.HasField("deletion_file"),
                          "row_ids": frag.WhichOneof("row_id_sequence")})
    tags = await ds.tags.list()
    listed = await asyncio.gather(*(ds.store.list(d) for d in STORAGE_DIRS))
    storage = {d: {"files": len(metas), "bytes": sum(m.size for m in metas)}
               for d, metas in zip(STORAGE_DIRS, listed, strict=True)}
    info: dict[str, Any] = {
        "uri": ds.uri, "version": ds.version, "latest_version": await ds.latest_version(),
        "data_storage_version": ds.data_storage_version,
        "writer": f"{m.writer_version.library} {writer_version_string(m.writer_version)}",
        "timestamp": manifest_time(ds.snapshot),
        "reader_feature_flags": int(m.reader_feature_flags),
        "writer_feature_flags": int(m.writer_feature_flags),
        "schema": [{"name": f.name, "id": f.id, "type": str(f.data_type),
                    "nullable": f.nullable} for f in ds.lance_schema.walk()],
        "num_fragments": len(fragments),
        "num_rows": sum(f["physical_rows"] - f["deleted_rows"] for f in fragments),
        "num_deleted_rows": sum(f["deleted_rows"] for f in fragments),
        "data_bytes": sum(f["bytes"] for f in fragments),
        "fragments": fragments,
        "indices": [{"name": i.name, "fields": list(i.fields), "uuid": index_uuid(i),
                     "dataset_version": int(i.dataset_version)}
                    for i in ds.snapshot.manifest_file.indices],
        "tags": {name: t.version for name, t in tags.items()},
        "config": dict(m.config),
        "num_versions": len(await ds.commit_handler.list_versions(ds.store)),
        "storage": storage,
    }
    summary = _table(f"{ds.uri} @ version {ds.version}", ["property", "value"], [
        ("latest version", info["latest_version"]),
        ("data storage version", info["data_storage_version"]),
        ("written by", info["writer"]), ("committed", info["timestamp"]),
        ("reader flags", describe_flags(m.reader_feature_flags)),
        ("writer flags", describe_flags(m.writer_feature_flags)),
        ("fragments", info["num_fragments"]), ("rows", info["num_rows"]),
        ("deleted rows", info["num_deleted_rows"]), ("data bytes", info["data_bytes"]),
        ("versions stored", info["num_versions"]),
        ("stored objects", ", ".join(f"{d}: {v['files']} ({v['bytes']} B)"
                                     for d, v in storage.items() if v["files"])),
        ("tags", ", ".join(f"{k}={v}" for k, v in info["tags"].items()) or "-"),
        ("config", ", ".join(f"{k}={v}" for k, v in info["config"].items()) or "-")])
    schema = _table("schema", ["id", "name", "type", "nullable"],
                    [(f["id"], f["name"], f["type"], f["nullable"]) for f in info["schema"]])
    frags = _table("fragments", ["id", "rows", "deleted", "files", "bytes"], [
        (f["id"], f["physical_rows"], f["deleted_rows"],
         ", ".join(x["path"] for x in f["files"]), f["bytes"]) for f in fragments[:50]])
    extra: list[Any] = [f"... and {len(fragments) - 50} more fragments"] if (
        len(fragments) > 50) else []
    indices = _table("indices", ["name", "fields", "uuid"], [
        (i["name"], i["fields"], i["uuid"]) for i in info["indices"]])
    out.emit(info, summary, schema, frags, *extra, *([indices] if info["indices"] else []))


async def _snapshots(ds: LanceDataset) -> list[Snapshot]:
    """Every version's snapshot, oldest first (manifests read concurrently)."""
    sem = asyncio.Semaphore(8)

    async def one(loc: ManifestLocation) -> Snapshot:
        async with sem:
            return await load_snapshot_at(ds.store, loc)

    return list(await asyncio.gather(*(one(loc) for loc in
                                       await ds.commit_handler.list_versions(ds.store))))


async def cmd_versions(args: argparse.Namespace, out: _Output) -> None:
    ds = await _open(args)
    tags_by_version: dict[int, list[str]] = {}
    for name, tag in (await ds.tags.list()).items():
        tags_by_version.setdefault(tag.version, []).append(name)
    rows: list[dict[str, Any]] = []
    for snap in await _snapshots(ds):
        txn = snap.manifest_file.transaction
        rows.append({"version": snap.version, "timestamp": manifest_time(snap),
                     "operation": operation_name(txn) if txn is not None else None,
                     "fragments": len(snap.fragments),
                     "rows": sum(live_rows(f) for f in snap.fragments),
                     "tags": sorted(tags_by_version.get(snap.version, []))})
    out.emit(rows, _table(f"versions of {ds.uri}", ["version", "committed", "operation",
                                                     "fragments", "rows", "tags"],
                          [(r["version"], r["timestamp"], r["operation"], r["fragments"],
                            r["rows"], ", ".join(r["tags"])) for r in rows]))


async def cmd_scan(args: argparse.Namespace, out: _Output) -> None:
    ds = await _open(args, args.version)
    columns = [c.strip() for c in args.columns.split(",")] if args.columns else None
    table = await ds.to_table(columns=columns, filter=args.filter, limit=args.limit)
    rows = table.to_pylist()
    out.emit(rows, _table(f"{table.num_rows} rows", table.column_names,
                          [list(r.values()) for r in rows]))


def _source(path: str, fmt: str | None) -> Any:
    """A pyarrow dataset over a file or directory (format from the option or the suffix)."""
    import pyarrow.dataset as pads

    if fmt is None:
        suffix = path.rstrip("/").rsplit(".", 1)[-1].lower() if "." in path else "parquet"
        fmt = {"pq": "parquet", "arrow": "ipc", "feather": "ipc", "ndjson": "json",
               "jsonl": "json"}.get(suffix, suffix)
    try:
        return pads.dataset(path, format=fmt)
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise InvalidInputError(f"cannot read {path} as {fmt}: {exc}") from exc


async def cmd_write(args: argparse.Namespace, out: _Output) -> None:
    source = _source(args.source, args.format)
    total = await asyncio.to_thread(source.count_rows)
    reader = source.scanner().to_reader()
    bar = out.progress("writing")
    kwargs = {"mode": args.mode, "storage_options": args.storage_options}
    if bar is None:
        ds = await write_dataset(reader, args.uri, **kwargs)
    else:
        with bar:
            task = bar.add_task("writing", total=total)
            ds = await write_dataset(reader, args.uri, **kwargs,
                                     progress=lambda done, _: bar.update(
                                         task, completed=done, total=total))
    rows = await ds.count_rows()
    out.emit({"version": ds.version, "rows_written": total, "rows": rows},
             f"wrote {total} rows: version {ds.version}, {rows} rows")


async def cmd_compact(args: argparse.Namespace, out: _Output) -> None:
    ds = await _open(args)
    bar = out.progress("compacting")
    options = {"target_rows_per_fragment": args.target_rows_per_fragment,
               "max_rows_per_group": args.max_rows_per_group,
               "materialize_deletions": False if args.no_materialize_deletions else None,
               "materialize_deletions_threshold": args.materialize_deletions_threshold,
               "num_threads": args.num_threads}
    if bar is None:
        result = await ds.compact_files(**options)
    else:
        with bar:
            task = bar.add_task("compacting", total=None)
            result = await ds.compact_files(
                **options, progress=lambda done, total: bar.update(task, completed=done,
                                                                   total=total))
    m = result.metrics
    info = {"version": result.dataset.version, "committed": result.dataset is not ds,
            "fragments_removed": m.fragments_removed, "fragments_added": m.fragments_added,
            "files_removed": m.files_removed, "files_added": m.files_added}
    text = (f"compacted into version {info['version']}: {m.fragments_removed} fragments -> "
            f"{m.fragments_added}" if info["committed"] else "nothing to compact")
    out.emit(info, text)


async def cmd_cleanup(args: argparse.Namespace, out: _Output) -> None:
    ds = await _open(args)
    bar = None if args.dry_run else out.progress("deleting")
    cleanup = ds.cleanup_old_versions
    kwargs: dict[str, Any] = {"delete_unverified": args.delete_unverified,
                              "error_if_tagged_old_versions": not args.ignore_tagged,
                              "dry_run": args.dry_run}
    if bar is None:
        stats = await cleanup(args.older_than, args.retain_versions, **kwargs)
    else:
        with bar:
            task = bar.add_task("deleting", total=None)
            stats = await cleanup(args.older_than, args.retain_versions, **kwargs,
                                  progress=lambda done, total: bar.update(
                                      task, completed=done, total=total))
    info = {"dry_run": stats.dry_run, "old_versions": stats.old_versions,
            "bytes_removed": stats.bytes_removed, "data_files": stats.data_files_removed,
            "deletion_files": stats.deletion_files_removed,
            "transaction_files": stats.transaction_files_removed,
            "index_files": stats.index_files_removed, "paths": list(stats.removed_paths)}
    verb = "would remove" if stats.dry_run else "removed"
    table = _table(f"cleanup ({verb})", ["what", "count"], [
        ("versions", stats.old_versions), ("data files", stats.data_files_removed),
        ("deletion files", stats.deletion_files_removed),
        ("transaction files", stats.transaction_files_removed),
        ("index files", stats.index_files_removed), ("bytes", stats.bytes_removed)])
    out.emit(info, table)


async def cmd_restore(args: argparse.Namespace, out: _Output) -> None:
    ds = await _open(args)
    new = await ds.restore(_version_arg(args.target))
    out.emit({"version": new.version, "restored": args.target},
             f"restored {args.target} as version {new.version}")


async def cmd_tag(args: argparse.Namespace, out: _Output) -> None:
    ds = await _open(args)
    if args.tag_command == "list":
        tags = [t for _, t in await ds.tags.list_ordered()]
        out.emit({t.name: t.to_dict() for t in tags},
                 _table("tags", ["name", "version", "created", "manifest bytes"],
                        [(t.name, t.version, t.created_at, t.manifest_size) for t in tags]))
    elif args.tag_command == "delete":
        await ds.tags.delete(args.name)
        out.emit({"deleted": args.name}, f"deleted tag {args.name}")
    else:
        call = ds.tags.create if args.tag_command == "create" else ds.tags.update
        tag = await call(args.name, _version_arg(args.target))
        out.emit({"name": tag.name, **tag.to_dict()},
                 f"tag {tag.name} -> version {tag.version}")


# -- argument parsing -------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``alance`` command."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="machine-readable output")
    common.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                        dest="storage_option", help="object store option (repeatable)")
    parser = argparse.ArgumentParser(prog="alance", description="Lance datasets from a shell",
                                     parents=[common])
    parser.add_argument("--progress", action="store_true",
                        help="show progress on stderr even when it is not a terminal")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, parents=[common])
        p.add_argument("uri", help="dataset URI or path")
        return p

    p = command("inspect", "schema, versions, fragments, files, flags and sizes")
    p.add_argument("--version", type=_version_arg, default=None, help="version or tag")
    command("versions", "list the versions")
    p = command("scan", "print rows")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--columns", default=None, help="comma-separated column names")
    p.add_argument("--filter", default=None, help="SQL predicate")
    p.add_argument("--version", type=_version_arg, default=None, help="version or tag")
    p = command("write", "write a Parquet, CSV, Arrow IPC or JSON file or directory")
    p.add_argument("source", help="file or directory to read")
    p.add_argument("--mode", choices=["create", "append", "overwrite"], default="create")
    p.add_argument("--format", choices=["parquet", "csv", "ipc", "json"], default=None,
                   help="source format (default: from the suffix)")
    p = command("compact", "merge small fragments, materialise deletions")
    p.add_argument("--target-rows-per-fragment", type=int, default=None)
    p.add_argument("--max-rows-per-group", type=int, default=None)
    p.add_argument("--materialize-deletions-threshold", type=float, default=None)
    p.add_argument("--no-materialize-deletions", action="store_true")
    p.add_argument("--num-threads", type=int, default=None)
    p = command("cleanup", "remove old versions and unreferenced files")
    p.add_argument("--older-than", type=parse_duration, default=None,
                   help="e.g. 14d, 12h, 0 (default: 2 weeks)")
    p.add_argument("--retain-versions", type=int, default=None)
    p.add_argument("--dry-run", action="store_true", help="only report what would go")
    p.add_argument("--delete-unverified", action="store_true",
                   help="also delete young unreferenced files (no concurrent writers!)")
    p.add_argument("--ignore-tagged", action="store_true",
                   help="keep tagged versions silently instead of failing")
    p = command("restore", "commit an old version (number or tag) as the latest")
    p.add_argument("target", metavar="VERSION")
    tag = sub.add_parser("tag", help="create, list, update or delete tags", parents=[common])
    tag_sub = tag.add_subparsers(dest="tag_command", required=True)
    for name in ("create", "update"):
        p = tag_sub.add_parser(name, parents=[common])
        p.add_argument("uri")
        p.add_argument("name")
        p.add_argument("target", metavar="VERSION")
    p = tag_sub.add_parser("list", parents=[common])
    p.add_argument("uri")
    p = tag_sub.add_parser("delete", parents=[common])
    p.add_argument("uri")
    p.add_argument("name")
    return parser


_COMMANDS = {"inspect": cmd_inspect, "versions": cmd_versions, "scan": cmd_scan,
             "write": cmd_write, "compact": cmd_compact,
             "cleanup": cmd_cleanup, "restore": cmd_restore,
             "tag": cmd_tag}


def _merge_common(argv: Sequence[str]) -> tuple[bool, list[str]]:
    """``--json`` and ``--storage-option`` wherever they appear (before or after the command)."""
    as_json = False
    options: list[str] = []
    rest: list[str] = []
    items = list(argv)
    i = 0
    while i < len(items):
        item = items[i]
        if item == "--json":
            as_json = True
        elif item == "--progress":
            rest.insert(0, item)
        elif item == "--storage-option" and i + 1 < len(items):
            options.append(items[i + 1])
            i += 1
        elif item.startswith("--storage-option="):
            options.append(item.partition("=")[2])
        else:
            rest.append(item)
        i += 1
    return as_json, [*rest, *(x for o in options for x in ("--storage-option", o))]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    as_json, args_list = _merge_common(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(args_list)
    args.json = as_json
    out = _Output(as_json, args.progress)
    try:
        args.storage_options = _storage_options(args.storage_option) or None
        asyncio.run(_COMMANDS[args.command](args, out))
    except AlanceError as exc:
        out.err.print(f"[red]error:[/red] {exc}", markup=True)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
