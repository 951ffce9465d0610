"""Shared fixtures."""

from __future__ import annotations

import uuid
from pathlib import Path

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
