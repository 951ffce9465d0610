"""Manifest feature flags: which bits exist, which alance understands, and computing them.

A manifest carries two bit sets, ``reader_feature_flags`` and ``writer_feature_flags``. A
client must refuse to read (resp. write) a table whose reader (resp. writer) flags contain a
bit it does not understand.

Bit values 1..32 come from Lance's ``feature_flags.rs``. pylance 14.0.2 additionally accepts
bits 128, 256, 1024 and 2048 and rejects 64, 512 and 4096 and up (probed by setting each bit
on a pylance-written manifest). 256 is set (on both sets) when a table mixes data file
versions (observed); pylance rejects a manifest that has 1024 on only one side and calls
it the "tagged fragment reuse index" flag. What 128 and 2048 mean is not known, so alance
treats them as unsupported.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import IntFlag

from alance._proto import table_pb2
from alance.errors import InvalidInputError, UnsupportedFeatureError
from alance.format.fragment_facts import FragmentFacts, all_facts, file_versions


class FeatureFlag(IntFlag):
    """Known feature flag bits (same values in reader and writer flags)."""

    #: Fragments may have deletion files (soft-deleted rows).
    DELETION_FILES = 1
    #: Row ids are stable and stored per fragment (``row_id_sequence``); ``next_row_id`` used.
    STABLE_ROW_IDS = 2
    #: Old marker for v2 data files; no longer set, ignored by readers.
    USE_V2_FORMAT_DEPRECATED = 4
    #: ``Manifest.config`` is non-empty (set on writer flags only).
    TABLE_CONFIG = 8
    #: Files may live under other roots listed in ``Manifest.base_paths``.
    BASE_PATHS = 16
    #: Writers must not write ``_transactions/*.txn`` files, only the inline section.
    DISABLE_TRANSACTION_FILE = 32
    #: pylance 14: known bit of unidentified meaning.
    UNIDENTIFIED_128 = 128
    #: pylance 14: data files of more than one file format version are present.
    MIXED_DATA_FILE_VERSIONS = 256
    #: pylance 14: tagged fragment-reuse-index history (must be on both flag sets).
    TAGGED_FRAGMENT_REUSE_INDEX = 1024
    #: pylance 14: known bit of unidentified meaning.
    UNIDENTIFIED_2048 = 2048


#: Every bit some Lance implementation is known to accept.
KNOWN_FLAGS = FeatureFlag(sum(int(f) for f in FeatureFlag))

#: Bits alance can read past. Stable row ids do not change how rows are stored, so scans are
#: unaffected (``_rowid`` then comes from the fragments' row id sequences). Mixed data
#: file versions are fine because every data file is read according to its own version.
READER_SUPPORTED = (
    FeatureFlag.DELETION_FILES
    | FeatureFlag.STABLE_ROW_IDS
    | FeatureFlag.USE_V2_FORMAT_DEPRECATED
    | FeatureFlag.TABLE_CONFIG
    | FeatureFlag.MIXED_DATA_FILE_VERSIONS
    | FeatureFlag.BASE_PATHS
)

#: Bits alance can commit on top of (it keeps deletion files and config as they are, and
#: assigns and carries stable row ids and row versions).
WRITER_SUPPORTED = (
    FeatureFlag.DELETION_FILES | FeatureFlag.USE_V2_FORMAT_DEPRECATED | FeatureFlag.TABLE_CONFIG
    | FeatureFlag.STABLE_ROW_IDS | FeatureFlag.BASE_PATHS
)


def describe_flags(flags: int) -> str:
    """Human readable list of the bits in ``flags`` (unknown bits shown as numbers)."""
    parts = []
    for bit in _bits(flags):
        if bit & KNOWN_FLAGS:
            parts.append(f"{FeatureFlag(bit).name}({bit})")
        else:
            parts.append(f"unknown({bit})")
    return ", ".join(parts) if parts else "none"


def _bits(flags: int) -> Iterable[int]:
    bit = 1
    while bit <= flags:
        if flags & bit:
            yield bit
        bit <<= 1


def _check(flags: int, supported: int, side: str) -> None:
    flags = int(flags)
    if flags < 0:
        raise InvalidInputError(f"{side} feature flags must be non-negative, got {flags}")
    missing = flags & ~int(supported)  # plain ints: IntFlag's ~ only spans named bits
    if missing:
        raise UnsupportedFeatureError(
            f"table requires {side} features alance does not support: {describe_flags(missing)}"
            f" (flags {flags})"
        )


def check_reader_flags(flags: int, supported: int = READER_SUPPORTED) -> None:
    """Raise :class:`UnsupportedFeatureError` naming every reader bit alance cannot handle."""
    _check(flags, supported, "reader")


def check_writer_flags(flags: int, supported: int = WRITER_SUPPORTED) -> None:
    """Raise :class:`UnsupportedFeatureError` naming every writer bit alance cannot handle."""
    _check(flags, supported, "writer")


def compute_feature_flags(
    manifest: table_pb2.Manifest,
    *,
    stable_row_ids: bool = False,
    disable_transaction_file: bool = False,
    facts: Sequence[FragmentFacts] | None = None,
) -> tuple[int, int]:
    """The ``(reader, writer)`` flags a manifest's content calls for, as Lance derives them.

    - any fragment with a deletion file: DELETION_FILES on both;
    - any fragment with row ids, or ``stable_row_ids``: STABLE_ROW_IDS on both (then every
      fragment must have row ids, else :class:`InvalidInputError`);
    - non-empty config: TABLE_CONFIG on the writer side only;
    - non-empty base_paths: BASE_PATHS on both;
    - ``disable_transaction_file``: DISABLE_TRANSACTION_FILE on the writer side;
    - data files of more than one (major, minor) file version: MIXED_DATA_FILE_VERSIONS on
      both (pylance 14 behaviour).

    Bits with no content rule here (e.g. pylance-14-only ones) are not produced; a writer
    that commits on top of a table must already have refused those via
    :func:`check_writer_flags`. ``facts``: those of ``manifest.fragments`` when known.
    """
    if facts is None:
        facts = all_facts(manifest.fragments)
    reader = 0
    writer = 0
    if any(f.deletion for f in facts):
        reader |= FeatureFlag.DELETION_FILES
        writer |= FeatureFlag.DELETION_FILES
    with_ids = [f.row_ids for f in facts]
    if any(with_ids) or stable_row_ids:
        if not all(with_ids):
            raise InvalidInputError("stable row ids: every fragment must carry row ids")
        reader |= FeatureFlag.STABLE_ROW_IDS
        writer |= FeatureFlag.STABLE_ROW_IDS
    if manifest.config:
        writer |= FeatureFlag.TABLE_CONFIG
    if manifest.base_paths:
        reader |= FeatureFlag.BASE_PATHS
        writer |= FeatureFlag.BASE_PATHS
    if disable_transaction_file:
        writer |= FeatureFlag.DISABLE_TRANSACTION_FILE
    if len(file_versions(facts)) > 1:
        reader |= FeatureFlag.MIXED_DATA_FILE_VERSIONS
        writer |= FeatureFlag.MIXED_DATA_FILE_VERSIONS
    return int(reader), int(writer)


def apply_feature_flags(
    manifest: table_pb2.Manifest,
    *,
    stable_row_ids: bool = False,
    disable_transaction_file: bool = False,
    facts: Sequence[FragmentFacts] | None = None,
) -> None:
    """Set ``manifest``'s reader/writer flags from :func:`compute_feature_flags`."""
    reader, writer = compute_feature_flags(
        manifest, stable_row_ids=stable_row_ids,
        disable_transaction_file=disable_transaction_file, facts=facts,
    )
    manifest.reader_feature_flags = reader
    manifest.writer_feature_flags = writer


__all__ = [
    "KNOWN_FLAGS",
    "READER_SUPPORTED",
    "WRITER_SUPPORTED",
    "FeatureFlag",
    "apply_feature_flags",
    "check_reader_flags",
    "check_writer_flags",
    "compute_feature_flags",
    "describe_flags",
]
