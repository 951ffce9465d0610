"""The blocking facade cannot drift from the async API: every public async method has a blocking
twin with the same signature (the twins are derived from it, see :mod:`alance.sync.twin`)."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import alance
import alance.sync as al
from alance.sync import twin as _twin

#: Where the blocking API differs on purpose (pylance's shape), and why.
DIFFERENCES = {
    ("LanceDataset", "latest_version"): "a property in pylance, a coroutine method in async",
    ("LanceFileReader", "open"): "pylance opens a file reader by its constructor",
}


def _public(cls: type) -> dict[str, object]:
    found: dict[str, object] = {}
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    for klass in reversed(cls.__mro__[:-1]):
        for name, value in vars(klass).items():
            if name.startswith("_") or name in fields:
                continue
            found[name] = value
    return found


def _signature(value: object) -> inspect.Signature | None:
    function = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
    if not callable(function) or isinstance(function, type):
        return None
    signature = inspect.signature(function)
    params = list(signature.parameters.values())
    if not isinstance(value, staticmethod) and params and params[0].name == "self":
        params = params[1:]
    return signature.replace(parameters=params, return_annotation=inspect.Signature.empty)


PAIRS = sorted(((twin, original) for original, twin in _twin._TWINS.items()),
               key=lambda pair: pair[0].__qualname__)


@pytest.mark.parametrize("twin, original", PAIRS, ids=[t.__qualname__ for t, _ in PAIRS])
def test_every_async_method_has_a_twin_with_its_signature(twin: type, original: type) -> None:
    missing, different = [], []
    for name, value in _public(original).items():
        if (twin.__name__, name) in DIFFERENCES:
            continue
        mine = inspect.getattr_static(twin, name, None)
        if mine is None:
            missing.append(name)
            continue
        theirs_sig, mine_sig = _signature(value), _signature(mine)
        if isinstance(value, property) or theirs_sig is None:
            if not isinstance(mine, property):
                different.append(f"{name}: a property in async")
            continue
        if mine_sig != theirs_sig:
            different.append(f"{name}: {mine_sig} != {theirs_sig}")
    assert missing == [] and different == []


def test_every_twin_is_exported_and_derived() -> None:
    for twin, original in PAIRS:
        assert issubclass(twin, _twin.Twin) and twin._mirrors is original
        exported = getattr(al, twin.__name__, None) or getattr(al.file, twin.__name__, None)
        assert exported is twin, twin.__name__
    # derived methods carry the async docstring and point back at the async method
    assert al.LanceDataset.to_table.__doc__ == alance.LanceDataset.to_table.__doc__
    assert al.LanceDataset.to_table.__wrapped__ is alance.LanceDataset.to_table  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["open_dataset", "plan_write", "plan_delete", "plan_update",
                                  "plan_distributed_compaction"])
def test_module_functions_have_twins(name: str) -> None:
    assert inspect.signature(getattr(al, name)) == inspect.signature(getattr(alance, name))


def test_documented_differences_still_exist() -> None:
    """A difference listed above that no longer exists must leave the list."""
    for (cls_name, name), _why in DIFFERENCES.items():
        twin = getattr(al, cls_name, None) or getattr(al.file, cls_name)
        mine = inspect.getattr_static(twin, name, None)
        theirs = inspect.getattr_static(twin._mirrors, name)
        assert mine is None or isinstance(mine, property) != isinstance(theirs, property)
