"""Deleting a whole dataset (pylance's ``LanceDataset.drop``).

Only a dataset root is deleted: the path must hold a manifest that can be read, so a
mistyped path that holds other data is refused (:class:`~alance.errors.InvalidInputError`)
rather than emptied. Everything under a dataset root goes, unmanaged files included.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from alance.dataset.api import _destination
from alance.dataset.versions.snapshot import load_snapshot
from alance.errors import CorruptFileError, DatasetNotFoundError, InvalidInputError

__all__ = ["drop_dataset"]


async def drop_dataset(base_uri: str | os.PathLike[str],
                       storage_options: Mapping[str, Any] | None = None,
                       ignore_not_found: bool | None = None) -> None:
    """Delete the dataset at ``base_uri`` and everything under it.

    Nothing there: :class:`~alance.errors.DatasetNotFoundError` unless ``ignore_not_found``.
    """
    uri = os.fspath(base_uri)
    store, handler = _destination(uri, storage_options, None)
    try:
        await load_snapshot(store, handler)
    except (DatasetNotFoundError, CorruptFileError) as exc:
        leftovers = await store.list_all()
        if isinstance(exc, DatasetNotFoundError) and not leftovers:
            if ignore_not_found:
                return
            raise
        raise InvalidInputError(
            f"{uri} is not a dataset root (it holds {len(leftovers)} objects but no readable "
            "manifest); delete them at the storage level if that is meant") from exc
    await store.delete_all()
