"""Shared fixtures."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["tests.conftest_s3"]


@pytest.fixture(params=["local", "memory"])
def uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh dataset URI on local disk and in memory."""
    if request.param == "local":
        return str(tmp_path / "ds.lance")
    return f"memory://{uuid.uuid4().hex}/ds.lance"


@pytest.fixture
def local_uri(tmp_path: Path) -> str:
    """A fresh dataset path on local disk (for tests that also open it with pylance)."""
    return str(tmp_path / "ds.lance")


@pytest.fixture
def shape_kernel_calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often the JSON shape kernel printed objects by shape and arrays as lists (so a
    test can show that those paths, not only the generic kernel, ran)."""
    from alance.format import jsonb_shapes

    calls = {"objects": 0, "arrays": 0}

    def counting(name: str, key: str) -> Any:
        inner = getattr(jsonb_shapes, name)

        def counted(*args: Any) -> Any:
            calls[key] += 1
            return inner(*args)
        return counted

    monkeypatch.setattr(jsonb_shapes, "_shape_text", counting("_shape_text", "objects"))
    monkeypatch.setattr(jsonb_shapes, "_array_texts", counting("_array_texts", "arrays"))
    return calls
