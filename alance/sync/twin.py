"""How the blocking facade is made: each blocking method is *derived* from its async original.

``to_table = blocking(AsyncDataset.to_table)`` gives a method with the async method's name,
docstring and signature (``inspect.signature`` follows ``__wrapped__``; type checkers see the
same parameters through ``ParamSpec``) that runs it on alance's background event loop
(:mod:`alance._loop`) and waits. Nothing is restated, so the two APIs cannot drift;
``tests/sync/test_sync_twins.py`` checks that every public async method has a twin.

The derivations:

* :func:`blocking` -- a coroutine method: run it, return its result;
* :func:`forwarding` -- a plain method of the async object (no IO): call it;
* :func:`iterating` -- an async iterator method: a blocking iterator over it;
* a ``returns=`` function maps the result (e.g. wrap an async object in its blocking twin, or
  move a pylance-style handle to the version a call committed).

Arguments that are blocking objects are passed to the async method as the async objects they
wrap (one level deep, also inside lists and tuples), so ``write_dataset(ds, ...)``,
``LanceFragment(ds, 0)`` and ``merge(other_ds, ...)`` take either kind.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, Concatenate, ParamSpec, TypeVar, overload

from alance import _loop

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

__all__ = ["Twin", "blocking", "blocking_function", "forwarding", "iterating", "twin_of",
           "unwrap"]

#: Async class -> its blocking twin class (filled by :meth:`Twin.__init_subclass__`).
_TWINS: dict[type, type[Twin]] = {}


class Twin:
    """Base of the blocking classes: each instance wraps one async object, ``_async``.

    A subclass names the async class it mirrors (``class Scanner(Twin, of=AsyncScanner)``);
    :func:`twin_of` then wraps any such async object in it.
    """

    _async: Any

    def __init_subclass__(cls, of: type | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if of is not None:
            cls._mirrors = of
            _TWINS[of] = cls

    _mirrors: type

    def __init__(self, inner: Any) -> None:
        self._async = inner

    def __repr__(self) -> str:
        return repr(self._async)

    def __reduce__(self) -> tuple[Any, ...]:
        return (twin_of, (self._async,))

    def _adopted(self) -> None:
        """Called when :func:`twin_of` wraps an async object without ``__init__``: a twin
        with state of its own (a lock, a target) sets it up here."""


def twin_of(value: Any) -> Any:
    """``value`` in its blocking twin if it is an async object that has one; lists and tuples
    of such objects element by element; anything else as it is."""
    cls = _TWINS.get(type(value))
    if cls is not None:
        twin = cls.__new__(cls)
        twin._async = value
        twin._adopted()
        return twin
    if isinstance(value, list) and value and type(value[0]) in _TWINS:
        return [twin_of(v) for v in value]
    if type(value) is tuple and any(type(v) in _TWINS for v in value):
        return tuple(twin_of(v) for v in value)
    return value


def unwrap(value: Any) -> Any:
    """The async object a blocking one wraps (also inside a list or tuple); else ``value``."""
    if isinstance(value, Twin):
        return value._async
    if isinstance(value, (list, tuple)) and any(isinstance(v, Twin) for v in value):
        return type(value)(unwrap(v) for v in value)
    return value


def _args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...],
                                                                  dict[str, Any]]:
    return (tuple(unwrap(a) for a in args), {k: unwrap(v) for k, v in kwargs.items()})


def _twinned(owner: Any, result: Any) -> Any:
    return twin_of(result)


@overload
def blocking(method: Callable[Concatenate[Any, P], Coroutine[Any, Any, R]], *,
             returns: None = None) -> Callable[Concatenate[Any, P], R]: ...
@overload
def blocking(method: Callable[Concatenate[Any, P], Coroutine[Any, Any, Any]], *,
             returns: Callable[[Any, Any], T]) -> Callable[Concatenate[Any, P], T]: ...
def blocking(method: Callable[Concatenate[Any, P], Coroutine[Any, Any, Any]], *,
             returns: Callable[[Any, Any], Any] | None = None,
             ) -> Callable[Concatenate[Any, P], Any]:
    """The blocking twin of the coroutine method ``method``: runs it on the background loop
    on ``self._async``; the result goes through ``returns(self, result)`` (default: async
    objects become their blocking twins)."""
    after = returns or _twinned

    @functools.wraps(method)
    def twin(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> Any:
        a, k = _args(args, kwargs)
        return after(self, _loop.run(method(self._async, *a, **k)))

    return twin


@overload
def forwarding(method: Callable[Concatenate[Any, P], R], *,
               returns: None = None) -> Callable[Concatenate[Any, P], R]: ...
@overload
def forwarding(method: Callable[Concatenate[Any, P], Any], *,
               returns: Callable[[Any, Any], T]) -> Callable[Concatenate[Any, P], T]: ...
def forwarding(method: Callable[Concatenate[Any, P], Any], *,
               returns: Callable[[Any, Any], Any] | None = None,
               ) -> Callable[Concatenate[Any, P], Any]:
    """The twin of a plain (non-IO) method: calls it on ``self._async`` (result mapped as in
    :func:`blocking`)."""
    after = returns or _twinned

    @functools.wraps(method)
    def twin(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> Any:
        a, k = _args(args, kwargs)
        return after(self, method(self._async, *a, **k))

    return twin


def iterating(method: Callable[Concatenate[Any, P], AsyncIterator[R]],
              ) -> Callable[Concatenate[Any, P], Iterator[R]]:
    """The twin of an async iterator method: a blocking iterator, stepped on the loop."""

    @functools.wraps(method)
    def twin(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> Iterator[R]:
        a, k = _args(args, kwargs)
        return _loop.iterate(method(self._async, *a, **k))

    return twin


@overload
def blocking_function(function: Callable[P, Coroutine[Any, Any, R]], *,
                      returns: None = None) -> Callable[P, R]: ...
@overload
def blocking_function(function: Callable[P, Coroutine[Any, Any, Any]], *,
                      returns: Callable[[Any], T]) -> Callable[P, T]: ...
def blocking_function(function: Callable[P, Coroutine[Any, Any, Any]], *,
                      returns: Callable[[Any], Any] | None = None) -> Callable[P, Any]:
    """The blocking twin of a coroutine function (async objects in the result become their
    twins, or ``returns(result)``)."""
    after = returns or twin_of

    @functools.wraps(function)
    def twin(*args: P.args, **kwargs: P.kwargs) -> Any:
        a, k = _args(args, kwargs)
        return after(_loop.run(function(*a, **k)))

    return twin


def returning_self(owner: Any, result: Any) -> Any:
    """``returns=`` for builder methods: the blocking builder itself (for chaining)."""
    return owner


def as_is(owner: Any, result: Any) -> Any:
    """``returns=`` that leaves the result alone (no twin wrapping)."""
    return result


__all__ += ["as_is", "returning_self"]
