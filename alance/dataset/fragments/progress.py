"""pylance's fragment write progress hooks (``lance.progress``): ``begin`` when a fragment's
data file is opened, ``complete`` when it is done. The filesystem tracker leaves a
``fragment_{id}.in_progress`` marker for files a crashed writer never finished."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from pyarrow import fs as pafs

from alance._proto import table_pb2
from alance.dataset.fragments.metadata import DataFile, FragmentMetadata

__all__ = ["FileSystemFragmentWriteProgress", "FragmentWriteProgress",
           "NoopFragmentWriteProgress", "ProgressEvents"]


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
        """Write the fragment's final metadata and remove the in-progress marker."""
        self._put(self._path(fragment, ".json"), fragment.to_json())
        self._fs.delete_file(self._path(fragment, self.PROGRESS_EXT))


class ProgressEvents:
    """Forwards :class:`~alance.dataset.fragments.write.FileEvents` to pylance-style progress hooks
    (``begin``/``complete`` with :class:`FragmentMetadata`), run off the event loop.
    ``fragment_id``: the id the hooks see (fragments get theirs only at commit)."""

    def __init__(self, progress: Any, fragment_id: int, field_ids: list[int]) -> None:
        self._progress = progress
        self._id = fragment_id
        self._fields = field_ids
        self._begun = False

    async def rows_arrived(self) -> None:
        """Call ``begin`` for the first fragment as soon as rows arrive (before its data file
        is open: the input may still fail while the first file's rows are gathered)."""
        self._begun = True
        meta = FragmentMetadata(self._id, [], 0)
        await asyncio.to_thread(self._progress.begin, meta)

    async def opened(self, name: str) -> None:
        """Call ``begin`` with the fragment's metadata so far (unless :meth:`rows_arrived`
        already began this fragment)."""
        if self._begun:
            self._begun = False
            return
        meta = FragmentMetadata(self._id, [DataFile(name, self._fields)], 0)
        await asyncio.to_thread(self._progress.begin, meta)

    async def finished(self, fragment: table_pb2.DataFragment) -> None:
        """Call ``complete`` with the fragment's metadata."""
        meta = FragmentMetadata.from_proto(fragment)
        meta.id = self._id
        await asyncio.to_thread(self._progress.complete, meta)
