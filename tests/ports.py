"""Does a class implement a port (a ``typing.Protocol``) member by member? For fakes, which mypy
does not check (it covers ``services``, ``streams`` and ``devtools`` only), and for the real
adapters, so that a fake cannot drift from the port its real counterpart implements.

:func:`port_mismatches` compares, for every public member of the port: that the class has it;
a property with a property or an attribute of the same type (a dataclass field); a method with
a method of the same kind (``async def`` for an ``async def``; ``def`` or an async generator for
a ``def`` returning an async iterator), the same parameters in the same order and kinds (more
only with defaults), and the same resolved annotations (aliases resolve to their target).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any


def _members(port: type) -> dict[str, Any]:
    return {
        name: value
        for name, value in vars(port).items()
        if not name.startswith("_") and (callable(value) or isinstance(value, property))
    }


def _hints(function: Callable[..., Any]) -> dict[str, Any]:
    return typing.get_type_hints(function)


def _attribute_type(cls: type, name: str) -> Any:
    """The annotated type of a class attribute or dataclass field ``name`` (``None``: none)."""
    for klass in cls.__mro__:
        annotations = inspect.get_annotations(klass)
        if name in annotations:
            return typing.get_type_hints(klass)[name]
    return None


def _method_mismatches(name: str, wanted: Callable[..., Any], got: Any) -> list[str]:
    if not callable(got) or isinstance(got, property):
        return [f"{name}: not a method"]
    # An async generator is not a coroutine function: it may stand for a port's ``def f() ->
    # AsyncIterator[X]`` (both return an async iterator when called), never for an ``async def``.
    if inspect.iscoroutinefunction(wanted) != inspect.iscoroutinefunction(got):
        kind = "an async def" if inspect.iscoroutinefunction(wanted) else "a plain def"
        return [f"{name}: the port has {kind}"]
    problems = []
    wanted_parameters = list(inspect.signature(wanted).parameters.values())
    got_parameters = list(inspect.signature(got).parameters.values())
    for index, parameter in enumerate(wanted_parameters):
        if index >= len(got_parameters):
            problems.append(f"{name}: no parameter {parameter.name}")
            continue
        other = got_parameters[index]
        if (other.name, other.kind) != (parameter.name, parameter.kind):
            problems.append(f"{name}: parameter {other.name} where {parameter.name} is expected")
    for extra in got_parameters[len(wanted_parameters) :]:
        if extra.default is inspect.Parameter.empty and extra.kind not in (
            inspect.Parameter.VAR_POSITIONAL,
            inspect.Parameter.VAR_KEYWORD,
        ):
            problems.append(f"{name}: parameter {extra.name} without a default")
    wanted_hints, got_hints = _hints(wanted), _hints(got)
    for key, hint in wanted_hints.items():
        if got_hints.get(key) != hint:
            problems.append(f"{name}: {key} is {got_hints.get(key)!r} where the port has {hint!r}")
    return problems


def port_mismatches(cls: type, port: type) -> list[str]:
    """How ``cls`` departs from ``port``, one line each (empty: it implements the port)."""
    problems: list[str] = []
    for name, wanted in _members(port).items():
        got = inspect.getattr_static(cls, name, None)
        if isinstance(wanted, property):
            hint = _hints(wanted.fget).get("return") if wanted.fget else None
            if isinstance(got, property):
                found = _hints(got.fget).get("return") if got.fget else None
            else:
                found = _attribute_type(cls, name)
            if found is None:
                problems.append(f"{name}: missing")
            elif found != hint:
                problems.append(f"{name}: {found!r} where the port has {hint!r}")
        elif got is None:
            problems.append(f"{name}: missing")
        else:
            problems.extend(_method_mismatches(name, wanted, got))
    return problems
