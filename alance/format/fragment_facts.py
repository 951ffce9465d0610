"""What a commit needs to know of each fragment, remembered by the fragment's encoded bytes.

Building the next manifest needs a few facts of every fragment (its id, whether it has a
deletion file or row ids, its data file versions, whether a data file holds only dropped
fields), and loading a manifest checks every fragment's numbers
(:func:`~alance.format.validate.validate_fragment`). Both are pure functions of the fragment,
and from one version to the next almost every fragment is unchanged: a 600-fragment append
changes none and adds one. So the facts of a checked fragment are remembered under its encoded
bytes (:func:`checked_facts`), and a manifest read again, or its successor, costs a lookup per
fragment instead of a walk through its protobuf message.

Only fragments that passed the checks are remembered: a fragment whose bytes differ in any way
is checked again. Pure: no IO.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from alance._proto import table_pb2
from alance.errors import CorruptFileError
from alance.format.validate import validate_fragment, validate_manifest, validate_schema

#: Field id of a superseded column in ``DataFile.fields``.
TOMBSTONE = -2


@dataclass(frozen=True, slots=True)
class FragmentFacts:
    """The facts of one fragment a commit and a load look at."""

    id: int
    #: The fragment has a deletion file.
    deletion: bool
    #: ... whose ``num_deleted_rows`` is 0: unknown (older writers did not record it).
    unknown_deletions: bool
    #: The fragment carries row ids (a stable row id sequence).
    row_ids: bool
    #: ``(major, minor)`` of each of its data files.
    file_versions: frozenset[tuple[int, int]]
    #: A data file holds no field but dropped ones (the next commit removes it).
    tombstoned: bool


_VERSIONS: dict[frozenset[tuple[int, int]], frozenset[tuple[int, int]]] = {}


def fragment_facts(fragment: table_pb2.DataFragment) -> FragmentFacts:
    """The facts of ``fragment`` (no checks)."""
    versions = set()
    tombstoned = False
    for data_file in fragment.files:
        versions.add((data_file.file_major_version, data_file.file_minor_version))
        fields = data_file.fields
        if not fields or (min(fields) == TOMBSTONE and max(fields) == TOMBSTONE):
            tombstoned = True
    frozen = frozenset(versions)
    frozen = _VERSIONS.setdefault(frozen, frozen)  # a handful of distinct sets: share them
    deletion = fragment.HasField("deletion_file")
    return FragmentFacts(
        id=int(fragment.id), deletion=deletion,
        unknown_deletions=deletion and fragment.deletion_file.num_deleted_rows == 0,
        row_ids=fragment.WhichOneof("row_id_sequence") is not None,
        file_versions=frozen, tombstoned=tombstoned)


#: Facts of fragments that passed :func:`validate_fragment`, by their encoded bytes.
_CHECKED: dict[bytes, FragmentFacts] = {}
#: Fragments remembered at most (then the memory starts over).
MAX_REMEMBERED = 100_000


def checked_facts(fragment: table_pb2.DataFragment, encoded: bytes, where: str,
                  ) -> FragmentFacts:
    """The facts of ``fragment`` (whose encoding is ``encoded``), after checking its numbers
    (:class:`~alance.errors.CorruptFileError` naming ``where``) unless these very bytes
    passed before."""
    found = _CHECKED.get(encoded)
    if found is not None:
        return found
    validate_fragment(fragment, where)
    facts = fragment_facts(fragment)
    if len(_CHECKED) >= MAX_REMEMBERED:
        _CHECKED.clear()
    _CHECKED[encoded] = facts
    return facts


def known_facts(fragment: table_pb2.DataFragment, encoded: bytes) -> FragmentFacts:
    """The facts of a fragment whose manifest needs no checks (committed by this process):
    remembered ones when these bytes were checked before, else computed (not remembered)."""
    found = _CHECKED.get(encoded)
    return found if found is not None else fragment_facts(fragment)


def checked_manifest_facts(manifest: table_pb2.Manifest, entries: Sequence[bytes] | None,
                           where: str) -> tuple[FragmentFacts, ...]:
    """Check a manifest as :func:`~alance.format.validate.validate_manifest` does and return
    its fragments' facts; ``entries`` (each fragment's encoded bytes, in order) let fragments
    that passed before go unchecked. ``None``: check every fragment."""
    fragments = manifest.fragments
    if entries is None or len(entries) != len(fragments):
        validate_manifest(manifest, where)
        return all_facts(fragments)
    validate_schema(manifest.fields, where)
    out = []
    seen: set[int] = set()
    for i, encoded in enumerate(entries):
        facts = _CHECKED.get(encoded)
        fid = facts.id if facts is not None else int(fragments[i].id)
        if fid in seen:
            raise CorruptFileError(f"{where}: fragment {fid}: id is used by two fragments")
        seen.add(fid)
        out.append(facts if facts is not None else checked_facts(fragments[i], encoded, where))
    return tuple(out)


def all_facts(fragments: Iterable[table_pb2.DataFragment]) -> tuple[FragmentFacts, ...]:
    """The facts of every fragment, computed from the messages (no checks, no memory)."""
    return tuple(fragment_facts(f) for f in fragments)


def file_versions(facts: Sequence[FragmentFacts]) -> set[tuple[int, int]]:
    """Every data file version the fragments use."""
    seen: set[frozenset[tuple[int, int]]] = {f.file_versions for f in facts}
    return set().union(*seen) if seen else set()


__all__ = [
    "FragmentFacts",
    "all_facts",
    "checked_facts",
    "checked_manifest_facts",
    "file_versions",
    "fragment_facts",
    "known_facts",
]
