"""The ``alance`` command line: a few runs as a real subprocess (``python -m alance.cli``),
the rest in-process through :func:`alance.cli.main` (starting Python costs seconds here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest

from alance.cli import main, parse_duration

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "alance.cli", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    if ok:
        assert proc.returncode == 0, proc.stderr
    return proc


class Cli:
    """Runs ``main`` in-process and captures its output."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys

    def __call__(self, *args: str, code: int = 0) -> tuple[str, str]:
        self.capsys.readouterr()
        try:
            got = main(list(args))
        except SystemExit as exc:  # argparse
            got = int(exc.code or 0)
        out, err = self.capsys.readouterr()
        assert got == code, err
        return out, err

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "--json")[0])


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(capsys)


@pytest.fixture
def dataset(tmp_path: Path) -> str:
    uri = str(tmp_path / "ds.lance")
    t = pa.table({"id": pa.array(range(100), pa.int64()), "name": [f"n{i}" for i in range(100)]})
    lance.write_dataset(t, uri, max_rows_per_file=10, data_storage_version="legacy")
    lance.dataset(uri).delete("id < 5")
    return uri


def test_subprocess_runs(dataset: str, tmp_path: Path) -> None:
    info = json.loads(run("inspect", dataset, "--json").stdout)
    assert info["version"] == 2 and info["num_fragments"] == 10
    missing = run("versions", str(tmp_path / "nothing.lance"), ok=False)
    assert missing.returncode == 1 and "error" in missing.stderr


def test_inspect_versions_scan(dataset: str, cli: Cli) -> None:
    info = cli.json("inspect", dataset)
    assert info["version"] == 2 and info["num_fragments"] == 10
    assert info["num_rows"] == 95 and info["num_deleted_rows"] == 5
    assert [f["name"] for f in info["schema"]] == ["id", "name"]
    assert info["data_bytes"] == sum(f["bytes"] for f in info["fragments"]) > 0
    assert info["fragments"][0]["deletion_file"] is True
    human = cli("inspect", dataset)[0]
    assert "fragments" in human and "DELETION_FILES" in human
    human = cli("versions", dataset)[0]
    assert "overwrite" in human and "delete" in human
    versions = cli.json("versions", dataset)
    assert [v["operation"] for v in versions] == ["overwrite", "delete"]
    rows = cli.json("scan", dataset, "--limit", "3", "--columns", "id", "--filter", "id > 50")
    assert rows == [{"id": 51}, {"id": 52}, {"id": 53}]
    assert "n97" in cli("scan", dataset, "--filter", "id = 97")[0]
    assert cli.json("inspect", dataset, "--version", "1")["num_rows"] == 100
    assert cli.json("--json", "versions", dataset)  # --json before the command too


def test_maintenance_commands(dataset: str, cli: Cli) -> None:
    tag = cli.json("tag", "create", dataset, "before", "2")
    assert tag["version"] == 2
    assert lance.dataset(dataset).tags.get_version("before") == 2
    result = cli.json("compact", dataset, "--target-rows-per-fragment", "50")
    assert result == {"version": 4, "committed": True, "fragments_removed": 10,
                      "fragments_added": 1, "files_removed": 11, "files_added": 1}
    assert lance.dataset(dataset).count_rows() == 95
    assert "nothing to compact" in cli("compact", dataset)[0]
    dry = cli.json("cleanup", dataset, "--older-than", "0", "--dry-run", "--ignore-tagged")
    assert dry["dry_run"] and dry["old_versions"] == 2
    _, err = cli("cleanup", dataset, "--older-than", "0", code=1)
    assert "before" in err
    done = cli.json("cleanup", dataset, "--older-than", "0", "--ignore-tagged")
    assert done["old_versions"] == 2 and not done["dry_run"]
    assert cli.json("restore", dataset, "before")["version"] == 5
    assert len(lance.dataset(dataset).get_fragments()) == 10
    cli("tag", "update", dataset, "before", "4")
    assert "before" in cli("tag", "list", dataset)[0]
    cli("tag", "delete", dataset, "before")
    assert cli.json("tag", "list", dataset) == {}


def test_errors_and_options(dataset: str, cli: Cli) -> None:
    assert "does not exist" in cli("restore", dataset, "99", code=1)[1]
    cli("cleanup", dataset, "--older-than", "soon", code=2)
    cli("frobnicate", dataset, code=2)
    cli("inspect", dataset, "--storage-option", "no_such_option=1", code=1)
    cli("inspect", dataset, "--storage-option", "novalue", code=1)
    assert parse_duration("1d12h").total_seconds() == 36 * 3600
    assert parse_duration("2w").days == 14 and parse_duration("0").total_seconds() == 0
    assert parse_duration("90s").total_seconds() == 90


def test_write_with_progress(tmp_path: Path, cli: Cli) -> None:
    import pyarrow.parquet as pq

    source = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": range(5000)}), source)
    uri = str(tmp_path / "w.lance")
    out, err = cli("--progress", "write", uri, str(source))
    assert "wrote 5000 rows" in out
    assert "writing: 5000/5000 (100%)" in err.splitlines()[-1]
    assert cli.json("write", uri, str(source), "--mode", "append")["rows"] == 10_000
    assert lance.dataset(uri).count_rows() == 10_000
    _, err = cli("write", uri, str(tmp_path / "missing.parquet"), code=1)
    assert "cannot read" in err


def test_cleanup_progress(dataset: str, cli: Cli) -> None:
    cli.json("compact", dataset, "--target-rows-per-fragment", "50")
    _, err = cli("--progress", "cleanup", dataset, "--older-than", "0")
    lines = err.splitlines()
    assert lines[0].startswith("deleting: 0/") and lines[-1].endswith("(100%)")
