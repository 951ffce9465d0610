"""pylance's fragment write progress hooks (``lance.progress``): ``begin`` when a fragment's
data file is opened, ``complete`` when it is done. The filesystem tracker leaves a
``fragment_{id}.in_progress`` marker for files a crashed writer never finished."""

from __future__ import annotations

import json
import os
from typing import Any

from pyarrow import fs as pafs

__all__ = ["FileSystemFragmentWriteProgress", "FragmentWriteProgress",
           "NoopFragmentWriteProgress"]


class FragmentWriteProgress:
    """Hooks called while fragments are written (subclass and override)."""

    def begin(self, fragment: Any, **kwargs: Any) -> None:
        """A fragment's data file is about to be written (``fragment``: its metadata so far)."""

    def complete(self, fragment: Any, **kwargs: Any) -> None:
        """The fragment is written (``fragment``: its final metadata)."""


class NoopFragmentWriteProgress(FragmentWriteProgress):
    """Hooks that do nothing."""


class FileSystemFragmentWriteProgress(FragmentWriteProgress):
    """Tracks writes in files under ``base_uri``: ``fragment_{id}.in_progress`` (with
    ``metadata``) from begin to complete, and ``fragment_{id}.json``, the fragment's
    metadata."""

    PROGRESS_EXT = ".in_progress"

    def __init__(self, base_uri: str | os.PathLike[str],
                 metadata: dict[str, str] | None = None) -> None:
        self._fs, self._base = pafs.FileSystem.from_uri(os.fspath(base_uri))
        self._metadata = dict(metadata or {})

    def _path(self, fragment: Any, ext: str) -> str:
        return f"{self._base}/fragment_{fragment.id}{ext}"

    def _put(self, path: str, value: Any) -> None:
        with self._fs.open_output_stream(path) as out:
            out.write(json.dumps(value).encode())

    def begin(self, fragment: Any, **kwargs: Any) -> None:
        """Write the in-progress marker and the fragment's metadata so far."""
        self._fs.create_dir(self._base, recursive=True)
        self._put(self._path(fragment, self.PROGRESS_EXT),
                  {"fragment_id": fragment.id, "metadata": self._metadata})
        self._put(self._path(fragment, ".json"), fragment.to_json())

    def complete(self, fragment: Any, **kwargs: Any) -> None:
        """Remove the in-progress marker."""
        self._fs.delete_file(self._path(fragment, self.PROGRESS_EXT))
