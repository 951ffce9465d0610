"""Regenerate ``alance/_proto`` from the ``.proto`` files in this directory.

Usage (from the repository root)::

    .venv/bin/python protos/generate.py          # rewrite alance/_proto/
    .venv/bin/python protos/generate.py --check  # exit 1 if alance/_proto/ is stale

Runs ``grpc_tools.protoc`` with ``--python_out`` and ``--mypy_out`` (mypy-protobuf), then
rewrites the flat imports protoc emits (``import file_pb2``) into package-relative ones
(``from . import file_pb2``) so the modules work inside the ``alance._proto`` package.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent
REPO_ROOT = PROTO_DIR.parent
OUT_DIR = REPO_ROOT / "alance" / "_proto"
PROTOS = (
    "encodings_v2_0.proto",
    "encodings_v2_1.proto",
    "file.proto",
    "file2.proto",
    "rowids.proto",
    "table.proto",
    "transaction.proto",
    "vector_index.proto",
)
MODULES = tuple(p.removesuffix(".proto") + "_pb2" for p in PROTOS)

INIT_TEXT = '''"""Generated protobuf bindings for the Lance format (do not edit by hand).

Regenerate with ``.venv/bin/python protos/generate.py``; sources live in ``protos/``.
"""

from . import (
    encodings_v2_0_pb2,
    encodings_v2_1_pb2,
    file2_pb2,
    file_pb2,
    rowids_pb2,
    table_pb2,
    transaction_pb2,
    vector_index_pb2,
)

__all__ = [
    "encodings_v2_0_pb2",
    "encodings_v2_1_pb2",
    "file2_pb2",
    "file_pb2",
    "rowids_pb2",
    "table_pb2",
    "transaction_pb2",
    "vector_index_pb2",
]
'''

# `import table_pb2 as table__pb2` (runtime) and `import table_pb2` (stubs).
_IMPORT_RE = re.compile(r"^import (" + "|".join(MODULES) + r")( as \w+)?$", re.MULTILINE)


def _fix_imports(text: str) -> str:
    return _IMPORT_RE.sub(lambda m: f"from . import {m.group(1)}{m.group(2) or ''}", text)


def _protoc_include() -> str:
    import grpc_tools

    return str(Path(grpc_tools.__file__).resolve().parent / "_proto")


def generate(out_dir: Path) -> None:
    """Run protoc into ``out_dir`` and post-process the output."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as raw:
        plugin = Path(sys.executable).parent / "protoc-gen-mypy"
        cmd = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{PROTO_DIR}",
            f"-I{_protoc_include()}",
            f"--python_out={raw}",
            f"--mypy_out={raw}",
            *PROTOS,
        ]
        if plugin.exists():
            cmd.insert(3, f"--plugin=protoc-gen-mypy={plugin}")
        # Run from the proto dir so protoc records bare file names ("table.proto").
        proc = subprocess.run(cmd, cwd=PROTO_DIR, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout + proc.stderr)
            raise SystemExit(f"protoc failed with exit code {proc.returncode}")
        for module in MODULES:
            for suffix in (".py", ".pyi"):
                src = Path(raw) / (module + suffix)
                text = _fix_imports(src.read_text(encoding="utf-8"))
                (out_dir / (module + suffix)).write_text(text, encoding="utf-8", newline="\n")
    (out_dir / "__init__.py").write_text(INIT_TEXT, encoding="utf-8", newline="\n")
    (out_dir / "py.typed").write_text("", encoding="utf-8")


def _expected_files() -> list[str]:
    names = ["__init__.py", "py.typed"]
    for module in MODULES:
        names += [module + ".py", module + ".pyi"]
    return sorted(names)


def check() -> int:
    """Regenerate into a temporary directory and compare with ``alance/_proto``."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "_proto"
        generate(fresh)
        stale = [
            name
            for name in _expected_files()
            if not (OUT_DIR / name).is_file()
            or not filecmp.cmp(fresh / name, OUT_DIR / name, shallow=False)
        ]
    if stale:
        print("alance/_proto is out of date; run protos/generate.py. Differs: " + ", ".join(stale))
        return 1
    print("alance/_proto is up to date")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only verify, do not write")
    args = parser.parse_args(argv)
    if args.check:
        return check()
    with tempfile.TemporaryDirectory(dir=OUT_DIR.parent) as tmp:
        fresh = Path(tmp) / "_proto"
        generate(fresh)
        OUT_DIR.mkdir(parents=True, exist_ok=True)
        for name in _expected_files():
            shutil.copyfile(fresh / name, OUT_DIR / name)
    for leftover in sorted(os.listdir(OUT_DIR)):
        if leftover.endswith(("_pb2.py", "_pb2.pyi")) and leftover not in _expected_files():
            print(f"note: stray file in alance/_proto: {leftover}")
    print(f"wrote {len(_expected_files())} files to {OUT_DIR.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
