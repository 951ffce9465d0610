"""Checking a dataset version end to end (pylance's ``LanceDataset.validate``).

Reads the metadata of every data file and every deletion file the version references and
checks them against the manifest: fragment ids unique and within ``max_fragment_id``, each
data file present with the fragment's ``physical_rows`` rows, field ids known to the schema
(or tombstoned), deletion counts equal to the deletion files' contents, stable row id
sequences as long as their fragments. The first inconsistency raises
:class:`~alance.errors.CorruptFileError` naming the fragment and file.
"""

from __future__ import annotations

import asyncio

from alance._proto import table_pb2
from alance.dataset.fragments.read import TOMBSTONE_FIELD_ID, ReadContext
from alance.dataset.query.row_ids import fragment_row_ids, uses_stable_row_ids
from alance.errors import CorruptFileError

__all__ = ["validate_version"]

#: Fragments checked at once.
CONCURRENCY = 8


async def validate_version(ctx: ReadContext) -> None:
    """Check the version ``ctx`` reads (see the module documentation)."""
    manifest = ctx.snapshot.manifest
    ids = [int(f.id) for f in manifest.fragments]
    if len(set(ids)) != len(ids):
        repeated = sorted({i for i in ids if ids.count(i) > 1})
        raise CorruptFileError(f"version {manifest.version}: fragment ids {repeated} repeat")
    if ids and manifest.HasField("max_fragment_id") and max(ids) > manifest.max_fragment_id:
        raise CorruptFileError(f"version {manifest.version}: fragment id {max(ids)} is above "
                               f"max_fragment_id {manifest.max_fragment_id}")
    known = {f.id for f in ctx.snapshot.schema.walk()}
    stable = uses_stable_row_ids(manifest)
    gate = asyncio.Semaphore(CONCURRENCY)

    async def check(fragment: table_pb2.DataFragment) -> None:
        async with gate:
            await _check_fragment(ctx, fragment, known, stable)

    await asyncio.gather(*(check(f) for f in manifest.fragments))


async def _check_fragment(ctx: ReadContext, fragment: table_pb2.DataFragment,
                          known: set[int], stable: bool) -> None:
    where = f"fragment {fragment.id}"
    if not fragment.files:
        raise CorruptFileError(f"{where} has no data files")
    for data_file in fragment.files:
        unknown = [i for i in data_file.fields if i != TOMBSTONE_FIELD_ID and i not in known]
        if unknown:
            raise CorruptFileError(f"{where}: data file {data_file.path} holds field ids "
                                   f"{unknown} the schema does not have")
        # Opening reads the file's metadata and checks its row count against the fragment.
        await ctx.data_file(data_file, ctx.file_schema(data_file), fragment)
    deleted = await ctx.deleted_offsets(fragment)  # checks the count against the file
    if deleted is not None and len(deleted) and int(deleted[-1]) >= fragment.physical_rows:
        raise CorruptFileError(f"{where}: its deletion file deletes row {int(deleted[-1])} of "
                               f"{fragment.physical_rows}")
    if stable:
        row_ids = await fragment_row_ids(ctx, fragment)
        if len(row_ids) != fragment.physical_rows:
            raise CorruptFileError(f"{where}: its row id sequence holds {len(row_ids)} ids "
                                   f"for {fragment.physical_rows} rows")
