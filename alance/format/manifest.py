"""Manifest files: framing, naming and the ``latest_version_hint.json`` sidecar.

Pure byte <-> object code; no IO.

Layout of a ``_versions/*.manifest`` file as Lance writes it (all integers little-endian)::

    [prelude]                 legacy (v0.1) datasets only: dictionary values of dictionary
                              columns; ``Field.dictionary.offset`` points in here
    [u32 len][IndexSection]   optional, at ``Manifest.index_section``
    [u32 len][Transaction]    optional, at ``Manifest.transaction_section`` (tag 23; older
                              writers used tag 21, ``transaction_section_deprecated``)
    [u32 len][Manifest]
    i64  position of the Manifest's length prefix
    i16  major (0)  i16 minor (2)
    b"LANC"

Every section position is an absolute file offset of the section's u32 length prefix. The
Manifest message must end exactly where the 16-byte footer starts.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, TypeVar

from google.protobuf.message import DecodeError, Message

from alance._proto import table_pb2, transaction_pb2
from alance.errors import CorruptFileError, InvalidInputError
from alance.format.fragment_facts import FragmentFacts, all_facts

MAGIC = b"LANC"
#: Footer version numbers pylance writes into manifest files.
FOOTER_MAJOR_VERSION = 0
FOOTER_MINOR_VERSION = 2
FOOTER_SIZE = 16
_FOOTER = struct.Struct("<qhh4s")
_LEN = struct.Struct("<I")

U64_MAX = (1 << 64) - 1
MANIFEST_SUFFIX = ".manifest"
VERSIONS_DIR = "_versions"
#: Data files live under this directory of the dataset root (``DataFile.path`` is relative to it).
DATA_DIR = "data"
TRANSACTIONS_DIR = "_transactions"
LATEST_VERSION_HINT_NAME = "latest_version_hint.json"
#: Versions with this bit set are "detached" (not part of the main history).
DETACHED_VERSION_MASK = 1 << 63
DETACHED_PREFIX = "d"

#: The ``writer_version.library`` alance puts into manifests it writes.
ALANCE_LIBRARY = "alance"


# --------------------------------------------------------------------------------------------
# Framing
# --------------------------------------------------------------------------------------------


@dataclass
class ManifestFile:
    """The decoded contents of one manifest file.

    ``index_section`` and ``transaction`` are the messages stored next to the manifest (``None``
    when absent). ``prelude`` holds the raw bytes in front of the sections (legacy dictionary
    values) and is written back verbatim so that offsets into it stay valid.

    When encoding, the section positions in ``manifest`` are recomputed; callers never set
    ``index_section``/``transaction_section`` themselves.

    ``facts`` are the :class:`~alance.format.fragment_facts.FragmentFacts` of
    ``manifest.fragments`` in order, when whoever made this object knows them (a load or a
    build); :meth:`fragment_facts` computes them otherwise. Whoever changes the fragments
    afterwards must update them.
    """

    manifest: table_pb2.Manifest
    index_section: table_pb2.IndexSection | None = None
    transaction: transaction_pb2.Transaction | None = None
    prelude: bytes = field(default=b"", repr=False)
    facts: tuple[FragmentFacts, ...] | None = field(default=None, repr=False, compare=False)

    def fragment_facts(self) -> tuple[FragmentFacts, ...]:
        """The facts of every fragment, in order (computed and kept when not known)."""
        if self.facts is None or len(self.facts) != len(self.manifest.fragments):
            self.facts = all_facts(self.manifest.fragments)
        return self.facts

    @property
    def indices(self) -> list[table_pb2.IndexMetadata]:
        """Index metadata of this version (empty when there is no index section)."""
        return list(self.index_section.indices) if self.index_section is not None else []


_M = TypeVar("_M", bound=Message)


def _parse(cls: type[_M], data: bytes | bytearray | memoryview, what: str) -> _M:
    msg = cls()
    try:
        msg.ParseFromString(bytes(data))
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise CorruptFileError(f"manifest file: cannot decode {what}: {exc}") from exc
    return msg


def _read_section(data: memoryview, pos: int, limit: int, cls: type[_M], what: str) -> _M:
    """Decode the length-prefixed message at ``pos``, which must end by ``limit``."""
    if pos < 0 or pos + 4 > limit:
        raise CorruptFileError(f"manifest file: {what} position {pos} is out of range")
    (length,) = _LEN.unpack_from(data, pos)
    end = pos + 4 + length
    if end > limit:
        raise CorruptFileError(
            f"manifest file: {what} at {pos} claims {length} bytes, past the end of its region"
        )
    return _parse(cls, data[pos + 4 : end], what)


def _transaction_pos(manifest: table_pb2.Manifest) -> int | None:
    if manifest.HasField("transaction_section"):
        return manifest.transaction_section
    if manifest.HasField("transaction_section_deprecated"):
        return manifest.transaction_section_deprecated
    return None


def decode_manifest_file(data: bytes | bytearray | memoryview) -> ManifestFile:
    """Decode a whole manifest file.

    Raises :class:`CorruptFileError` when the file is truncated, has a bad magic/footer, a bad
    length or offset, or undecodable protobuf.
    """
    view = memoryview(data).cast("B")
    size = len(view)
    if size < FOOTER_SIZE + 4:
        raise CorruptFileError(f"manifest file: only {size} bytes, too small")
    pos, _major, _minor, magic = _FOOTER.unpack_from(view, size - FOOTER_SIZE)
    if magic != MAGIC:
        raise CorruptFileError(f"manifest file: bad magic {magic!r}, expected {MAGIC!r}")
    body_end = size - FOOTER_SIZE
    if pos < 0 or pos + 4 > body_end:
        raise CorruptFileError(f"manifest file: manifest position {pos} is out of range")
    (length,) = _LEN.unpack_from(view, pos)
    if pos + 4 + length != body_end:
        raise CorruptFileError(
            f"manifest file: manifest length {length} at {pos} does not reach the footer"
            f" (expected {body_end - pos - 4})"
        )
    manifest = _parse(table_pb2.Manifest, view[pos + 4 : body_end], "Manifest")

    starts = [pos]
    index_section: table_pb2.IndexSection | None = None
    if manifest.HasField("index_section"):
        index_section = _read_section(
            view, manifest.index_section, pos, table_pb2.IndexSection, "index section"
        )
        starts.append(manifest.index_section)
    transaction: transaction_pb2.Transaction | None = None
    txn_pos = _transaction_pos(manifest)
    if txn_pos is not None:
        transaction = _read_section(
            view, txn_pos, pos, transaction_pb2.Transaction, "transaction section"
        )
        starts.append(txn_pos)
    prelude_end = min(starts)
    # Never written by Lance today, but if a version_aux_data offset points past the prelude keep
    # everything before the manifest so that offset stays valid.
    if manifest.version_aux_data and manifest.version_aux_data >= prelude_end:
        prelude_end = pos
    return ManifestFile(
        manifest=manifest,
        index_section=index_section,
        transaction=transaction,
        prelude=bytes(view[:prelude_end]),
    )


def manifest_message_bytes(data: bytes | bytearray | memoryview) -> memoryview:
    """The encoded Manifest message inside a manifest file that decodes
    (:func:`decode_manifest_file` checked its footer)."""
    view = memoryview(data).cast("B")
    pos = _FOOTER.unpack_from(view, len(view) - FOOTER_SIZE)[0]
    (length,) = _LEN.unpack_from(view, pos)
    return view[pos + 4 : pos + 4 + length]


#: Field number of ``Manifest.fragments``.
_FRAGMENTS_FIELD = 2


def _varint_rest(buf: bytes, i: int, first: int) -> tuple[int, int]:
    """A varint whose first byte ``first`` had the continuation bit, and the position after
    it (``buf[i]`` is its second byte)."""
    value, shift = first & 0x7F, 7
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, i


def fragment_entries(message: bytes | memoryview) -> list[bytes] | None:
    """The encoded DataFragment messages of an encoded Manifest message, in order (the bytes
    of each ``fragments`` entry), by walking its top-level fields; ``None`` if the walk meets
    something it does not expect (the caller then works from the decoded message)."""
    buf = bytes(message)
    out: list[bytes] = []
    i, n = 0, len(buf)
    try:
        while i < n:
            tag = buf[i]
            i += 1
            if tag & 0x80:  # one byte is the common case: only longer ones take a call
                tag, i = _varint_rest(buf, i, tag)
            kind = tag & 7
            if kind == 2:
                length = buf[i]
                i += 1
                if length & 0x80:
                    length, i = _varint_rest(buf, i, length)
                if tag >> 3 == _FRAGMENTS_FIELD:
                    out.append(buf[i : i + length])
                i += length
            elif kind == 0:
                while buf[i] & 0x80:
                    i += 1
                i += 1
            elif kind == 1:
                i += 8
            elif kind == 5:
                i += 4
            else:
                return None
    except IndexError:
        return None
    return out if i == n else None


def _frame(msg: Message) -> bytes:
    payload = msg.SerializeToString(deterministic=True)
    return _LEN.pack(len(payload)) + payload


def encode_manifest_file(mf: ManifestFile) -> bytes:
    """Encode a manifest file, filling in the section positions in (a copy of) the manifest.

    The manifest's ``index_section`` / ``transaction_section`` fields are set from
    ``mf.index_section`` / ``mf.transaction``; ``transaction_section_deprecated`` (tag 21) is
    only kept, pointing at the same bytes, if the input manifest already had it.
    ``mf`` is not modified.
    """
    manifest = table_pb2.Manifest()
    manifest.CopyFrom(mf.manifest)
    parts = [bytes(mf.prelude)]
    offset = len(parts[0])
    if mf.index_section is not None:
        manifest.index_section = offset
        chunk = _frame(mf.index_section)
        parts.append(chunk)
        offset += len(chunk)
    else:
        manifest.ClearField("index_section")
    had_old_txn_field = manifest.HasField("transaction_section_deprecated")
    if mf.transaction is not None:
        manifest.transaction_section = offset
        if had_old_txn_field:
            manifest.transaction_section_deprecated = offset
        chunk = _frame(mf.transaction)
        parts.append(chunk)
        offset += len(chunk)
    else:
        manifest.ClearField("transaction_section")
        manifest.ClearField("transaction_section_deprecated")
    parts.append(_frame(manifest))
    parts.append(_FOOTER.pack(offset, FOOTER_MAJOR_VERSION, FOOTER_MINOR_VERSION, MAGIC))
    return b"".join(parts)


def decode_transaction_file(data: bytes | bytearray | memoryview) -> transaction_pb2.Transaction:
    """Decode a ``_transactions/*.txn`` file (a bare Transaction message, no framing)."""
    return _parse(transaction_pb2.Transaction, data, "transaction file")


def encode_transaction_file(txn: transaction_pb2.Transaction) -> bytes:
    """Encode a Transaction as the contents of a ``.txn`` file."""
    return txn.SerializeToString(deterministic=True)


# --------------------------------------------------------------------------------------------
# Naming
# --------------------------------------------------------------------------------------------


class ManifestNamingScheme(Enum):
    """How manifest files under ``_versions/`` are named."""

    #: ``{version}.manifest``
    V1 = "v1"
    #: ``{u64::MAX - version:020}.manifest``: newest version sorts first in a listing.
    V2 = "v2"


_V2_STEM_LEN = 20
_DIGITS = re.compile(r"[0-9]+")


def _check_version(version: int) -> None:
    if not 0 <= version <= U64_MAX:
        raise InvalidInputError(f"version {version} is not an unsigned 64-bit integer")


def manifest_file_name(version: int, scheme: ManifestNamingScheme) -> str:
    """File name (no directory) of the manifest of ``version`` under ``scheme`` (see
    :func:`detached_manifest_file_name` for detached versions)."""
    _check_version(version)
    if scheme is ManifestNamingScheme.V2:
        return f"{U64_MAX - version:020d}{MANIFEST_SUFFIX}"
    return f"{version}{MANIFEST_SUFFIX}"


def detached_manifest_file_name(version: int) -> str:
    """File name of a detached version's manifest: ``d{version}.manifest`` (either scheme)."""
    _check_version(version)
    return f"{DETACHED_PREFIX}{version}{MANIFEST_SUFFIX}"


def parse_manifest_file_name(name: str) -> tuple[int, ManifestNamingScheme] | None:
    """Return ``(version, scheme)`` for a committed manifest file name, else ``None``.

    Accepts a bare name or a path (only the last ``/`` component is looked at). Staged files
    (``N.manifest-<uuid>``), detached manifests (``dN.manifest``), the version hint and
    anything else return ``None``. Like Lance, a 20-digit stem means V2.
    """
    base = name.rsplit("/", 1)[-1]
    if not base.endswith(MANIFEST_SUFFIX):
        return None
    stem = base[: -len(MANIFEST_SUFFIX)]
    if not _DIGITS.fullmatch(stem):
        return None
    number = int(stem)
    if number > U64_MAX:
        return None
    if len(stem) == _V2_STEM_LEN:
        return U64_MAX - number, ManifestNamingScheme.V2
    return number, ManifestNamingScheme.V1


def detect_naming_scheme(names: Iterable[str]) -> ManifestNamingScheme | None:
    """The naming scheme of the newest manifest among ``names`` (``None`` if there is none)."""
    best: tuple[int, ManifestNamingScheme] | None = None
    for name in names:
        parsed = parse_manifest_file_name(name)
        if parsed is not None and (best is None or parsed[0] > best[0]):
            best = parsed
    return best[1] if best is not None else None


def transaction_file_name(read_version: int, uuid: str) -> str:
    """Name (under ``_transactions/``) of a transaction file: ``{read_version}-{uuid}.txn``."""
    _check_version(read_version)
    return f"{read_version}-{uuid}.txn"


def is_detached_version(version: int) -> bool:
    """True for detached versions (high bit set), which are outside the main history."""
    return bool(version & DETACHED_VERSION_MASK)


# --------------------------------------------------------------------------------------------
# latest_version_hint.json
# --------------------------------------------------------------------------------------------


def encode_latest_version_hint(version: int) -> bytes:
    """Bytes of ``_versions/latest_version_hint.json`` as pylance writes them: ``{"version":N}``."""
    _check_version(version)
    return b'{"version":%d}' % version


def decode_latest_version_hint(data: bytes | bytearray | memoryview) -> int | None:
    """The version in a hint file, or ``None`` if it is not a valid hint.

    The hint is only advisory, so malformed content is not an error.
    """
    try:
        obj = json.loads(bytes(data))
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(obj, dict):
        return None
    version = obj.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version <= U64_MAX:
        return None
    return version


# --------------------------------------------------------------------------------------------
# Writer version
# --------------------------------------------------------------------------------------------

_SEMVER = re.compile(
    r"(?P<core>[0-9]+\.[0-9]+\.[0-9]+)"
    r"(?:-(?P<pre>[0-9A-Za-z.-]+))?"
    r"(?:\+(?P<build>[0-9A-Za-z.-]+))?"
)


def make_writer_version(
    library_version: str, library: str = ALANCE_LIBRARY
) -> table_pb2.Manifest.WriterVersion:
    """A ``WriterVersion`` message for ``library`` at ``library_version``.

    A semver version is split the way Lance does: ``version`` keeps only major.minor.patch and
    the pre-release / build parts go into their own fields. Other strings are stored as-is.
    """
    wv = table_pb2.Manifest.WriterVersion(library=library)
    m = _SEMVER.fullmatch(library_version)
    if m is None:
        wv.version = library_version
        return wv
    wv.version = m.group("core")
    if m.group("pre"):
        wv.prerelease = m.group("pre")
    if m.group("build"):
        wv.build_metadata = m.group("build")
    return wv


def needs_migration(manifest: table_pb2.Manifest,
                    indices: Iterable[Any] = ()) -> bool:
    """Whether a manifest lacks fields that newer writers fill in (a writer version, each
    fragment's ``physical_rows``, each deletion file's ``num_deleted_rows``, each index's
    fragment bitmap): the next commit would add them."""
    if not manifest.HasField("writer_version"):
        return True
    for frag in manifest.fragments:
        if frag.physical_rows == 0 and len(frag.files):
            return True
        if frag.HasField("deletion_file") and frag.deletion_file.num_deleted_rows == 0:
            return True
    return any(not getattr(index, "fragment_bitmap", b"x") for index in indices)


def writer_version_string(wv: table_pb2.Manifest.WriterVersion) -> str:
    """Full version string of a writer (version plus pre-release/build parts if present)."""
    text = wv.version
    if wv.HasField("prerelease"):
        text += f"-{wv.prerelease}"
    if wv.HasField("build_metadata"):
        text += f"+{wv.build_metadata}"
    return text


__all__ = [
    "ALANCE_LIBRARY",
    "DETACHED_VERSION_MASK",
    "LATEST_VERSION_HINT_NAME",
    "MAGIC",
    "ManifestFile",
    "ManifestNamingScheme",
    "TRANSACTIONS_DIR",
    "U64_MAX",
    "DATA_DIR",
    "VERSIONS_DIR",
    "decode_latest_version_hint",
    "decode_manifest_file",
    "decode_transaction_file",
    "detached_manifest_file_name",
    "detect_naming_scheme",
    "encode_latest_version_hint",
    "encode_manifest_file",
    "encode_transaction_file",
    "is_detached_version",
    "fragment_entries",
    "make_writer_version",
    "manifest_message_bytes",
    "needs_migration",
    "manifest_file_name",
    "parse_manifest_file_name",
    "transaction_file_name",
    "writer_version_string",
]
