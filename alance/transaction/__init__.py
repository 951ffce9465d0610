"""Transactions: the operations (wire-compatible with Lance), applying them to a manifest, and
deciding how they interact with concurrent commits. Pure code: no IO, no asyncio.

* :mod:`.operations` — constructors for every operation and questions about them;
* :mod:`.build` — :func:`build_manifest`, the next manifest from the latest one;
* :mod:`.conflicts` — the conflict matrix (:class:`RebaseState`);
* :mod:`.indices` — keeping carried index metadata right.
"""

from __future__ import annotations

from alance.transaction.build import build_manifest, next_fragment_id
from alance.transaction.conflicts import Outcome, RebaseState
from alance.transaction.operations import (
    new_append,
    new_create_index,
    new_data_replacement,
    new_delete,
    new_merge,
    new_overwrite,
    new_project,
    new_reserve_fragments,
    new_restore,
    new_rewrite,
    new_update,
    new_update_config,
    operation_name,
)

__all__ = [
    "Outcome",
    "RebaseState",
    "build_manifest",
    "new_append",
    "new_create_index",
    "new_data_replacement",
    "new_delete",
    "new_merge",
    "new_overwrite",
    "new_project",
    "new_reserve_fragments",
    "new_restore",
    "new_rewrite",
    "new_update",
    "new_update_config",
    "next_fragment_id",
    "operation_name",
]
