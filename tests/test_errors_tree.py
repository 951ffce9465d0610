"""Every error class lives in :mod:`alance.errors`, and the tree drawn in its docstring is the
real one (names, parents and the standard exceptions each also is)."""

from __future__ import annotations

import importlib
import pkgutil
import re

import alance
from alance import errors


def _drawn() -> dict[str, tuple[str | None, list[str]]]:
    """name -> (parent drawn above it, standard bases named in '(also X)')."""
    tree: dict[str, tuple[str | None, list[str]]] = {}
    stack: list[tuple[int, str]] = []
    for line in errors.__doc__.splitlines():  # type: ignore[union-attr]
        match = re.match(r"^(\s*(?:[│ ]\s*)*(?:[├└]── )?)([A-Z]\w+)(.*)$", line)
        if not match or not match.group(2).endswith("Error"):
            continue
        depth, name, rest = len(match.group(1)), match.group(2), match.group(3)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        also = re.findall(r"also (\w+)", rest)
        tree[name] = (stack[-1][1] if stack else None, also)
        stack.append((depth, name))
    return tree


def test_the_drawn_tree_is_the_class_tree() -> None:
    drawn = _drawn()
    real = {name: cls for name, cls in vars(errors).items()
            if isinstance(cls, type) and issubclass(cls, errors.AlanceError)}
    assert set(drawn) == set(real)
    for name, (parent, also) in drawn.items():
        cls = real[name]
        if parent is not None:
            assert cls.__bases__[0] is real[parent], name
        for base in also:
            assert issubclass(cls, getattr(__import__("builtins"), base)), (name, base)
        assert name in alance.__all__ and getattr(alance, name) is cls, name


def test_no_error_class_is_defined_elsewhere() -> None:
    elsewhere = []
    for info in pkgutil.walk_packages(alance.__path__, "alance."):
        if info.name == "alance.errors" or info.name.startswith(("alance._proto", "alance.spark")):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (isinstance(value, type) and issubclass(value, errors.AlanceError)
                    and value.__module__ == info.name and not name.startswith("_")):
                elsewhere.append(f"{info.name}.{name}")
    assert elsewhere == []
