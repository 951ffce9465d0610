"""Lance's automatic cleanup, configured in the dataset config and run after commits.

Auto cleanup: when the config holds ``lance.auto_cleanup.interval`` (and optionally
``lance.auto_cleanup.older_than``, a duration such as ``"14days"`` or ``"1h 30m"``, and
``lance.auto_cleanup.retain_versions``), every commit whose version number is a multiple of
the interval also removes old versions (:func:`auto_cleanup_hook`), as Lance does.
The commit loop calls :func:`auto_cleanup_hook` after each commit.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypedDict

from alance.commit.handler import CommitHandler
from alance.dataset.versions.cleanup import CleanupStats, cleanup_old_versions
from alance.dataset.versions.snapshot import Snapshot, load_snapshot
from alance.errors import InvalidInputError
from alance.io.store import DatasetStore

__all__ = ["AUTO_CLEANUP_INTERVAL", "AUTO_CLEANUP_OLDER_THAN", "AUTO_CLEANUP_RETAIN_VERSIONS",
           "AutoCleanupConfig", "AutoCleanupPolicy", "auto_cleanup_config", "auto_cleanup_hook",
           "format_duration", "parse_duration"]

log = logging.getLogger(__name__)

#: Config keys of automatic cleanup (Lance's names).
AUTO_CLEANUP_INTERVAL = "lance.auto_cleanup.interval"
AUTO_CLEANUP_OLDER_THAN = "lance.auto_cleanup.older_than"
AUTO_CLEANUP_RETAIN_VERSIONS = "lance.auto_cleanup.retain_versions"

_UNITS = {
    **dict.fromkeys(("nsec", "ns"), dt.timedelta(microseconds=1) / 1000),
    **dict.fromkeys(("usec", "us", "µs"), dt.timedelta(microseconds=1)),
    **dict.fromkeys(("msec", "ms"), dt.timedelta(milliseconds=1)),
    **dict.fromkeys(("seconds", "second", "sec", "s"), dt.timedelta(seconds=1)),
    **dict.fromkeys(("minutes", "minute", "min", "m"), dt.timedelta(minutes=1)),
    **dict.fromkeys(("hours", "hour", "hr", "h"), dt.timedelta(hours=1)),
    **dict.fromkeys(("days", "day", "d"), dt.timedelta(days=1)),
    **dict.fromkeys(("weeks", "week", "w"), dt.timedelta(weeks=1)),
    **dict.fromkeys(("months", "month", "M"), dt.timedelta(seconds=2_630_016)),
    **dict.fromkeys(("years", "year", "y"), dt.timedelta(seconds=31_557_600)),
}
_PART = re.compile(r"\s*(\d+)\s*([^\d\s]+)")
#: Units of :func:`format_duration`, largest first (seconds each, name, pluralised).
_FORMAT_UNITS = ((31_557_600, "year", True), (2_630_016, "month", True), (86_400, "day", True),
                 (3600, "h", False), (60, "m", False), (1, "s", False))


def parse_duration(text: str) -> dt.timedelta:
    """A duration in the notation Lance reads from the config: ``"14days"``, ``"1h 30m"``,
    ``"1ms"`` (integers with units ns, us, ms, s, m(in), h(our), d(ay), w(eek), M(onth: 30.44
    days), y(ear: 365.25 days), and their long names)."""
    pos, total, parts = 0, dt.timedelta(0), 0
    stripped = text.rstrip()
    while pos < len(stripped):
        match = _PART.match(stripped, pos)
        if match is None or match.group(2) not in _UNITS:
            raise InvalidInputError(f"not a duration: {text!r}")
        total += int(match.group(1)) * _UNITS[match.group(2)]
        pos, parts = match.end(), parts + 1
    if not parts:
        raise InvalidInputError(f"not a duration: {text!r}")
    return total


def format_duration(seconds: int) -> str:
    """Whole seconds in that notation, largest units first (``"1day 1h 1m 1s"``, ``"0s"``)."""
    if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < 0:
        raise InvalidInputError(f"a duration must be a whole number of seconds >= 0, "
                                f"got {seconds!r}")
    words = []
    for size, name, plural in _FORMAT_UNITS:
        count, seconds = divmod(seconds, size)
        if count:
            words.append(f"{count}{name}{'s' if plural and count > 1 else ''}")
    return " ".join(words) or "0s"


class AutoCleanupConfig(TypedDict):
    """pylance's ``auto_cleanup_options``: clean up every ``interval`` versions, removing
    versions older than ``older_than_seconds``."""

    interval: int
    older_than_seconds: int


def auto_cleanup_config(interval: int, older_than_seconds: int) -> dict[str, str]:
    """The config keys pylance's ``auto_cleanup_options`` (``{"interval": ...,
    "older_than_seconds": ...}``) set when a dataset is created."""
    if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
        raise InvalidInputError(f"auto cleanup interval must be an integer >= 1, "
                                f"got {interval!r}")
    return {AUTO_CLEANUP_INTERVAL: str(interval),
            AUTO_CLEANUP_OLDER_THAN: format_duration(older_than_seconds)}


@dataclass(frozen=True)
class AutoCleanupPolicy:
    """The auto cleanup settings of a config: every ``interval`` versions, remove versions
    older than ``older_than`` and not among the ``retain_versions`` newest."""

    interval: int
    older_than: dt.timedelta | None
    retain_versions: int | None

    @classmethod
    def from_config(cls, config: Mapping[str, str]) -> AutoCleanupPolicy | None:
        """The policy, ``None`` without an interval; InvalidInputError for unreadable values."""
        if AUTO_CLEANUP_INTERVAL not in config:
            return None
        interval = _positive(config[AUTO_CLEANUP_INTERVAL], AUTO_CLEANUP_INTERVAL)
        older = config.get(AUTO_CLEANUP_OLDER_THAN)
        retain = config.get(AUTO_CLEANUP_RETAIN_VERSIONS)
        return cls(interval, parse_duration(older) if older is not None else None,
                   _positive(retain, AUTO_CLEANUP_RETAIN_VERSIONS) if retain is not None
                   else None)


def _positive(text: str, key: str) -> int:
    if re.fullmatch(r"[0-9]+", text) is None or int(text) < 1:
        raise InvalidInputError(f"config {key}={text!r} is not an integer >= 1")
    return int(text)


async def auto_cleanup_hook(store: DatasetStore, handler: CommitHandler,
                            committed: Snapshot) -> CleanupStats | None:
    """Lance's automatic cleanup, run after ``committed`` was committed.

    When the committed config has an interval dividing the new version number, old versions
    are cleaned up as seen from the version the commit was built on (so that one and the new
    one are always kept): those older than ``older_than`` (all, if it is not set) and not
    among the ``retain_versions`` newest; tagged versions make it fail. Failures are logged,
    never raised: the commit itself succeeded.
    """
    try:
        policy = AutoCleanupPolicy.from_config(committed.manifest.config)
        if policy is None or committed.version % policy.interval or committed.version < 2:
            return None
        base = await load_snapshot(store, handler, committed.version - 1)
        older_than = policy.older_than
        if older_than is None and policy.retain_versions is None:
            older_than = dt.timedelta(0)
        return await cleanup_old_versions(store, handler, base, older_than,
                                          policy.retain_versions)
    except Exception as exc:  # the commit is done: report, as Lance does
        log.error("automatic cleanup of %s after version %d failed: %s", store.uri,
                  committed.version, exc)
        return None
