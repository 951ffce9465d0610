"""pylance's ``LanceSchema`` / ``LanceField`` objects for :mod:`alance.sync`.

pylance calls ``schema.fields()``, ``field.name()`` and ``field.id()`` where alance's own
:class:`alance.format.schema.LanceSchema` has attributes; these thin views over alance's
objects answer both spellings (``f.name`` is a string that can also be called), give field
metadata as text as pylance does, and hand anything else to the object they wrap
(``walk()``, ``project()``, ``metadata``...). :attr:`LanceSchema.lance_schema` is the wrapped
object.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from alance.format.schema import LanceField as _Field
from alance.format.schema import LanceSchema as _Schema

__all__ = ["LanceField", "LanceSchema"]


class _Text(str):
    """A string pylance code may also call (``field.name()``)."""

    __slots__ = ()

    def __call__(self) -> str:
        return str(self)


class _Number(int):
    """An int pylance code may also call (``field.id()``)."""

    def __call__(self) -> int:
        return int(self)


class _Listing(list[Any]):
    """A list pylance code may also call (``schema.fields()``)."""

    def __call__(self) -> list[Any]:
        return list(self)


class LanceField:
    """pylance's view of one field (see the module documentation)."""

    def __init__(self, field: _Field) -> None:
        self.lance_field = field

    @property
    def name(self) -> _Text:
        """The field's name (also callable, as pylance's ``name()``)."""
        return _Text(self.lance_field.name)

    @property
    def id(self) -> _Number:
        """The field's id (also callable, as pylance's ``id()``)."""
        return _Number(self.lance_field.id)

    @property
    def parent_id(self) -> _Number:
        """The parent field's id (-1 at the top)."""
        return _Number(self.lance_field.parent_id)

    @property
    def metadata(self) -> dict[str, str]:
        """The field's metadata as text."""
        return {k: v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                for k, v in self.lance_field.metadata.items()}

    def children(self) -> list[LanceField]:
        """The child fields."""
        return [LanceField(c) for c in self.lance_field.children]

    def is_unenforced_primary_key(self) -> bool:
        """Whether the field is part of the (unenforced) primary key."""
        return bool(self.lance_field.unenforced_primary_key)

    def unenforced_primary_key_position(self) -> int | None:
        """Its position in the primary key (``None``: not part of it)."""
        if not self.lance_field.unenforced_primary_key:
            return None
        return int(self.lance_field.unenforced_primary_key_position)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.lance_field, name)

    def __eq__(self, other: object) -> bool:
        other = getattr(other, "lance_field", other)
        return bool(self.lance_field == other)

    def __hash__(self) -> int:
        return hash((self.lance_field.id, self.lance_field.name))

    def __repr__(self) -> str:
        return (f"LanceField(name={self.lance_field.name!r}, id={self.lance_field.id}, "
                f"type={self.lance_field.logical_type!r})")


class LanceSchema:
    """pylance's view of a Lance schema (see the module documentation)."""

    def __init__(self, schema: _Schema) -> None:
        self.lance_schema = schema

    @staticmethod
    def from_pyarrow(schema: pa.Schema) -> LanceSchema:
        """A Lance schema for an Arrow schema (field ids assigned depth first from 0)."""
        return LanceSchema(_Schema.from_arrow(schema))

    @property
    def fields(self) -> _Listing:
        """The top-level fields (also callable, as pylance's ``fields()``)."""
        return _Listing(LanceField(f) for f in self.lance_schema.fields)

    def field(self, name: str) -> LanceField | None:
        """The top-level field named ``name`` (``None``: none)."""
        found = next((f for f in self.lance_schema.fields if f.name == name), None)
        return None if found is None else LanceField(found)

    def field_case_insensitive(self, name: str) -> LanceField | None:
        """The top-level field whose name equals ``name`` ignoring case."""
        found = next((f for f in self.lance_schema.fields if f.name.lower() == name.lower()),
                     None)
        return None if found is None else LanceField(found)

    def unenforced_primary_key(self) -> list[LanceField]:
        """The primary key's fields, in key order."""
        keyed = [f for f in self.lance_schema.walk() if f.unenforced_primary_key]
        keyed.sort(key=lambda f: f.unenforced_primary_key_position)
        return [LanceField(f) for f in keyed]

    def to_pyarrow(self) -> pa.Schema:
        """The Arrow schema."""
        return self.lance_schema.to_arrow()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.lance_schema, name)

    def __eq__(self, other: object) -> bool:
        other = getattr(other, "lance_schema", other)
        return bool(self.lance_schema == other)

    def __hash__(self) -> int:
        return hash(tuple(f.id for f in self.lance_schema.walk()))

    def __repr__(self) -> str:
        fields = ", ".join(f"Field {{ name: {f.name!r}, id: {f.id}, parent_id: {f.parent_id}, "
                           f"logical_type: {f.logical_type!r} }}"
                           for f in self.lance_schema.walk())
        return f"Schema {{ fields: [{fields}], metadata: {dict(self.lance_schema.metadata)} }}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (LanceSchema, (self.lance_schema,))
