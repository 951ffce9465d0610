"""Deadlines: how long an operation may take, retries included.

Two bounds apply to every object store operation (a read of some ranges, a put, a list):

* its own deadline, the storage option ``deadline`` (seconds; default
  :data:`DEFAULT_DEADLINE`), which covers the operation's every attempt, the waits between
  them and the wait for an in-flight slot, so a hung or failing endpoint is given up on after
  that long however many retries were left;
* the deadline of the whole call it is part of, set with :func:`deadline`::

      with alance.deadline(5):                      # also around alance.sync calls
          ds = await alance.write_dataset(t, uri)

  No store operation started inside the block runs past the block's end.

Either raises :class:`~alance.errors.DeadlineExceededError`. A write that runs out of time
commits nothing: the manifest is written last, and a manifest put whose outcome cannot be read
back in time raises :class:`~alance.errors.CommitOutcomeUnknownError` instead (the files are
kept, as the commit may have happened).
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import time
from collections.abc import Iterator
from typing import Any

from alance.errors import InvalidInputError

#: Seconds one store operation may take, all its attempts included, unless the storage option
#: ``deadline`` says otherwise.
DEFAULT_DEADLINE = 60.0
#: A store operation (retries included) slower than this many seconds is logged at WARNING
#: (storage option ``slow_warning``).
DEFAULT_SLOW_WARNING = 10.0

_CALL_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "alance_call_deadline", default=None)


def seconds(value: Any, name: str = "deadline") -> float:
    """A duration given as seconds (number or numeric string), ``"30s"``, ``"2m"``, ``"500ms"``
    or a ``timedelta``."""
    if isinstance(value, dt.timedelta):
        out = value.total_seconds()
    else:
        text = str(value).strip().lower()
        scale = 1.0
        for suffix, factor in (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0)):
            if text.endswith(suffix):
                text, scale = text[: -len(suffix)], factor
                break
        try:
            out = float(text) * scale
        except ValueError as exc:
            raise InvalidInputError(f"{name} must be a duration in seconds, not {value!r}",
                                    ) from exc
    if not out > 0:
        raise InvalidInputError(f"{name} must be positive, not {value!r}")
    return out


@contextlib.contextmanager
def deadline(timeout: float | dt.timedelta) -> Iterator[float]:
    """Bound every object store operation started inside the block to end within ``timeout``
    seconds from now (nested blocks keep the earlier end). Yields the end as a
    ``time.monotonic()`` value.

    Works around async code (``with alance.deadline(5): await ...``) and around blocking
    ``alance.sync`` calls, whose work on alance's background loop inherits the bound.
    """
    end = time.monotonic() + seconds(timeout, "timeout")
    current = _CALL_DEADLINE.get()
    if current is not None:
        end = min(end, current)
    token = _CALL_DEADLINE.set(end)
    try:
        yield end
    finally:
        _CALL_DEADLINE.reset(token)


def call_deadline() -> float | None:
    """The end (``time.monotonic()``) of the innermost :func:`deadline` block, if any."""
    return _CALL_DEADLINE.get()
