"""Restore: make an old version the content of a new latest version.

Nothing is deleted or rewritten: a Restore transaction commits a copy of the old version's
manifest (fragments, schema, indices, config) as version ``latest + 1``. Versions in between
stay readable until :func:`~alance.dataset.versions.cleanup.cleanup_old_versions` removes them.
"""

from __future__ import annotations

from alance.commit.handler import CommitHandler
from alance.dataset.commit.loop import DEFAULT_MAX_RETRIES, commit_transaction
from alance.dataset.versions.snapshot import Snapshot, load_snapshot
from alance.dataset.versions.tags import resolve_version
from alance.errors import InvalidInputError
from alance.format.feature_flags import check_writer_flags
from alance.io.store import DatasetStore
from alance.transaction.operations import new_restore


async def restore_version(store: DatasetStore, handler: CommitHandler, version: int | str,
                          *, max_retries: int = DEFAULT_MAX_RETRIES) -> Snapshot:
    """Commit ``version`` (a number or a tag name) again as the newest version.

    The Restore is based on the newest version, so it conflicts with (and is refused after)
    nearly every concurrent commit, as in Lance. Returns the new version.
    """
    number = await resolve_version(store, handler, version)
    if number is None or number < 1:
        raise InvalidInputError(f"cannot restore version {version!r}")
    source = await load_snapshot(store, handler, number)  # NotFoundError if it is gone
    check_writer_flags(source.manifest.writer_feature_flags)
    latest = await load_snapshot(store, handler)
    check_writer_flags(latest.manifest.writer_feature_flags)
    txn = new_restore(latest.version, number)
    return await commit_transaction(store, handler, latest, txn,
                                    data_storage_version=latest.data_storage_version,
                                    max_retries=max_retries)
