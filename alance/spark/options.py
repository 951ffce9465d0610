"""The ``alance`` data source's options: its own, Spark's table options, storage options.

Spark hands a Python data source one flat, lower-cased option map. Three kinds of names
arrive in it:

* alance's own options (:data:`OWN_OPTIONS`: ``version``, ``columns``, ``filter``, ...);
* for a catalog table (``CREATE TABLE ... USING alance [LOCATION ...] [OPTIONS (...)]
  [TBLPROPERTIES (...)]``), Spark's table keys (:data:`TABLE_KEYS`: ``location``, ``owner``,
  ``provider``, ``comment``, ...), every ``OPTIONS`` entry twice (``k`` and ``option.k``) and
  every ``TBLPROPERTIES`` entry as is. Such a map is recognised by its ``provider`` key or an
  ``option.`` key; only the ``option.`` entries are then options, ``location`` is the path,
  and everything else is a table property (kept by Spark's catalog, ignored here);
* everything else is a storage option for the object store (``aws_region``, ...). A name that
  is neither an alance option nor a storage option the URI's store takes is refused, by name.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from alance.errors import InvalidInputError

#: Options the data source itself understands (lower case, as Spark passes them).
OWN_OPTIONS = frozenset({
    "path", "version", "versionasof", "timestampasof", "tag", "columns", "filter", "pushdown",
    "rows_per_partition", "partitions", "batch_size", "max_rows_per_file", "max_rows_per_group",
    "commit_handler", "data_storage_version", "changes_from", "changes_to", "include_deleted",
    "save_mode", "mergeschema", "stream_id", "checkpointlocation", "queryname",
})
#: Keys Spark's catalog adds for a table; never storage options.
TABLE_KEYS = frozenset({"location", "owner", "provider", "comment", "external",
                        "is_managed_location", "serialization.format", "transient_lastddltime"})
#: The save modes of :class:`alance.spark.AlanceDataSource` writes (``save_mode`` option).
SAVE_MODES = ("append", "overwrite", "error", "errorifexists", "ignore")


@dataclass(frozen=True)
class SourceOptions:
    """The options of one read or write, sorted by kind."""

    own: dict[str, str]
    storage: dict[str, Any]
    table: dict[str, str]

    @property
    def uri(self) -> str:
        """The dataset URI (``path``, or a table's ``location``)."""
        uri = self.own.get("path") or self.table.get("location")
        if not uri:
            raise InvalidInputError("no dataset URI: use .load(uri) / .save(uri) or "
                                    ".option('path', uri) (Spark passes no options at all "
                                    "when reading or writing a catalog table: use a "
                                    "temporary view, CREATE TEMPORARY VIEW t USING alance "
                                    "OPTIONS (path '...'))")
        text = str(uri)
        if text.startswith("file:") and not text.startswith("file://"):
            text = text[len("file:"):]  # Spark's form of a local table location
        return text


def split_options(options: Mapping[str, Any]) -> SourceOptions:
    """Sort Spark's option map into alance's own options, storage options and table keys."""
    lowered = {str(k).lower(): v for k, v in options.items()}
    is_table = "provider" in lowered or any(k.startswith("option.") for k in lowered)
    own: dict[str, str] = {}
    storage: dict[str, Any] = {}
    table: dict[str, str] = {}
    if is_table:
        given = {k[len("option."):]: v for k, v in lowered.items() if k.startswith("option.")}
        for k, v in lowered.items():
            if k.startswith("option.") or k in given:
                continue
            if k == "path":
                own[k] = v
            else:
                table[k] = v  # Spark's table keys and TBLPROPERTIES
    else:
        given = lowered
    for k, v in given.items():
        if k in OWN_OPTIONS:
            own[k] = v
        elif k in TABLE_KEYS:
            table[k] = v
        else:
            storage[k] = v
    return SourceOptions(own, storage, table)


def int_option(options: Mapping[str, Any], name: str, default: int | None) -> int | None:
    """An integer option (``None``: absent, then ``default``)."""
    value = options.get(name)
    if value is None:
        return default
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise InvalidInputError(f"option {name!r} must be an integer, got {value!r}") from None
    lowest = 0 if name in ("version", "versionasof", "changes_from", "changes_to") else 1
    if number < lowest:
        raise InvalidInputError(f"option {name!r} must be positive, got {value!r}")
    return number


def bool_option(options: Mapping[str, Any], name: str, default: bool) -> bool:
    """A ``true``/``false`` option."""
    value = str(options.get(name, default)).strip().lower()
    if value not in ("true", "false"):
        raise InvalidInputError(f"option {name!r} must be true or false, not {value!r}")
    return value == "true"


@dataclass(frozen=True)
class VersionChoice:
    """Which version a read opens: a number or tag, a time, or the latest (all ``None``)."""

    version: int | str | None = None
    asof: dt.datetime | None = None


def version_choice(own: Mapping[str, Any]) -> VersionChoice:
    """The time travel options (``version``, ``versionAsOf``, ``tag``, ``timestampAsOf``);
    at most one may be given. ``version`` may be a number or a tag name."""
    given = [k for k in ("version", "versionasof", "tag", "timestampasof") if own.get(k)
             not in (None, "")]
    if len(given) > 1:
        raise InvalidInputError(f"give at most one of the time travel options, not {given}")
    if not given:
        return VersionChoice()
    name = given[0]
    value = str(own[name]).strip()
    if name == "tag":
        return VersionChoice(version=value)
    if name == "timestampasof":
        try:
            when = dt.datetime.fromisoformat(value)
        except ValueError:
            raise InvalidInputError(f"option 'timestampAsOf' is not a timestamp "
                                    f"(YYYY-MM-DD[ HH:MM:SS[.ffffff]][+HH:MM]): {value!r}"
                                    ) from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        return VersionChoice(asof=when)
    if name == "version" and not value.lstrip("-").isdigit():
        return VersionChoice(version=value)  # a tag name
    return VersionChoice(version=int_option(own, name, None))


def save_mode(own: Mapping[str, Any], overwrite: bool) -> str:
    """The effective save mode: Spark's ``overwrite`` flag, refined by ``save_mode``."""
    mode = str(own.get("save_mode") or ("overwrite" if overwrite else "append")).lower()
    if mode not in SAVE_MODES:
        raise InvalidInputError(f"option 'save_mode' must be one of {SAVE_MODES}, not {mode!r}")
    if overwrite and mode != "overwrite":
        raise InvalidInputError(f"save_mode {mode!r} needs Spark's mode('append') (Spark "
                                "passes Python data sources only append or overwrite)")
    return "errorifexists" if mode == "error" else mode
