"""Blocking twins of the distributed jobs (:mod:`alance.dataset.distributed`), derived from the
async ones (:mod:`alance.sync.twin`). Every plan pickles: ship it to the engine's tasks."""

from __future__ import annotations

import dataclasses
from typing import Any

from alance.dataset.distributed import compaction as _compaction
from alance.dataset.distributed import dml as _dml
from alance.dataset.distributed import write as _write
from alance.sync.dataset import LanceDataset, new_dataset, new_in_result
from alance.sync.twin import Twin, blocking, blocking_function, forwarding

__all__ = ["DistributedCompaction", "DistributedDelete", "DistributedUpdate",
           "DistributedWrite", "plan_delete", "plan_distributed_compaction", "plan_update",
           "plan_write"]


class _Plan(Twin):
    """A job plan: its fields (``job_id``, ``uri``, ``commit_handler``...) read through."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._async,))

    def __getattr__(self, name: str) -> Any:
        inner = self.__dict__.get("_async")
        if inner is not None and name in {f.name for f in dataclasses.fields(inner)}:
            return getattr(inner, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


_W = _write.DistributedWrite


class DistributedWrite(_Plan, of=_W):
    """Blocking twin of :class:`alance.DistributedWrite`."""

    @property
    def arrow_schema(self) -> Any:
        """The Arrow schema the tasks write."""
        return self._async.arrow_schema

    @property
    def staging_dir(self) -> str:
        """Where the job's staging records live."""
        return self._async.staging_dir

    write = blocking(_W.write)
    write_to = blocking(_W.write_to)
    commit = blocking(_W.commit, returns=new_dataset)
    abort = blocking(_W.abort)


plan_write = blocking_function(_write.plan_write, returns=DistributedWrite)

_D = _dml.DistributedDelete


class DistributedDelete(_Plan, of=_D):
    """Blocking twin of :class:`alance.DistributedDelete`."""

    tasks = forwarding(_D.tasks)
    run = blocking(_D.run)
    commit = blocking(_D.commit, returns=new_in_result)
    abort = blocking(_D.abort)


plan_delete = blocking_function(_dml.plan_delete, returns=DistributedDelete)

_U = _dml.DistributedUpdate


class DistributedUpdate(_Plan, of=_U):
    """Blocking twin of :class:`alance.DistributedUpdate`."""

    tasks = forwarding(_U.tasks)
    run = blocking(_U.run)
    commit = blocking(_U.commit, returns=new_in_result)
    abort = blocking(_U.abort)


plan_update = blocking_function(_dml.plan_update, returns=DistributedUpdate)

_C = _compaction.DistributedCompaction


class DistributedCompaction(_Plan, of=_C):
    """Blocking twin of :class:`alance.DistributedCompaction`."""

    tasks = forwarding(_C.tasks)
    run = blocking(_C.run)
    commit = blocking(_C.commit, returns=new_dataset)
    abort = blocking(_C.abort)


plan_distributed_compaction = blocking_function(_compaction.plan_distributed_compaction,
                                                returns=DistributedCompaction)

# A LanceDataset is what the commits return.
_ = LanceDataset
