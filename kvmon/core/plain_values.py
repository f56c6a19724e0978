"""Snapshots as plain JSON values and back: the exact round trip a recording line makes (NaN and the infinities
tagged, every field rebuilt against the Snapshot's type annotations).

A line read back is outside input: a value of the wrong type, an integer past 64 bits or a null where a value
belongs raises ``RecordingLineError`` for that line alone; text is made valid (lone surrogates become U+FFFD).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from kvmon.core.jsonvals import MAX_INT
from kvmon.core.sanitize import clean_text

_FLOAT_TAGS = frozenset({"nan", "inf", "-inf"})


class RecordingLineError(ValueError):
    """One line of a recording that is not a snapshot this kvmon can rebuild: skipped, with this as the reason."""


def to_plain(value: Any) -> Any:
    """A dataclass/enum/tuple/mapping tree as JSON-ready plain values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)
                if not f.metadata.get("transient")}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, float):  # JSON has no NaN/Infinity: tagged strings keep the round trip exact
        return value if math.isfinite(value) else {"__float__": repr(value)}
    if isinstance(value, Mapping):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [to_plain(v) for v in value]
    return value


def _tagged_float(value: Any) -> float | None:
    """``{"__float__": "nan"}`` (how NaN and the infinities are written) as the float, else None."""
    if isinstance(value, dict) and len(value) == 1 and "__float__" in value:
        tag = value["__float__"]
        if isinstance(tag, str) and tag.strip().lower() in _FLOAT_TAGS:
            return float(tag)
        raise RecordingLineError(f"a tagged float of {tag!r}")
    return None


def _number(tp: type, value: Any) -> Any:
    if isinstance(value, bool):
        raise RecordingLineError(f"{value!r} where a number belongs")
    if tp is float:
        tagged = _tagged_float(value)
        if tagged is not None:
            return tagged
        if isinstance(value, (int, float)):
            try:
                return float(value)
            except OverflowError:
                raise RecordingLineError("a number past any float") from None
    elif isinstance(value, int) and abs(value) <= MAX_INT:
        return value
    raise RecordingLineError(f"{type(value).__name__} where {tp.__name__} belongs")


def from_plain(tp: Any, value: Any) -> Any:
    """Rebuild a value of type ``tp`` (as annotated on the Snapshot dataclasses) from plain JSON.

    Raises RecordingLineError when ``value`` does not fit ``tp``: every scalar is checked, text is made valid.
    """
    return _converter(tp)(value)


_Convert = Callable[[Any], Any]


def _null(_value: Any) -> NoReturn:
    raise RecordingLineError("null where a value belongs")


def _wrong(v: Any, what: str) -> NoReturn:
    """Raise for ``v`` where ``what`` belongs: a null said as such, else its type."""
    if v is None:
        _null(v)
    raise RecordingLineError(f"{type(v).__name__} where {what} belongs")


@functools.cache
def _converter(tp: Any) -> _Convert:
    """The function that rebuilds a ``tp`` from plain JSON, made once per type (a replay reads every line)."""
    if tp is Any:
        return lambda v: v
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        optional = type(None) in args
        choices = [(a, _converter(a)) for a in args if a is not type(None)]
        last = choices[-1][1]

        def union(v: Any) -> Any:
            if v is None:
                return None if optional else _null(v)
            for a, conv in choices[:-1]:  # e.g. int | float: JSON's own type, when one fits, else the last
                if isinstance(a, type) and isinstance(v, a) and not isinstance(v, bool):
                    return conv(v)
            return last(v)
        return union
    if tp is float:
        def real(v: Any) -> Any:
            if type(v) is float:  # what JSON gives (NaN and the infinities come tagged)
                return v
            return _null(v) if v is None else _number(float, v)
        return real
    if tp is int:
        def integer(v: Any) -> Any:
            if type(v) is int and -MAX_INT <= v <= MAX_INT:
                return v
            return _null(v) if v is None else _number(int, v)
        return integer
    if tp is bool:
        return lambda v: v if isinstance(v, bool) else _wrong(v, "a bool")
    if tp is str:
        return lambda v: clean_text(v) if isinstance(v, str) else _wrong(v, "text")
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        hints = typing.get_type_hints(tp)
        fields_ = [(f.name, _converter(hints[f.name])) for f in dataclasses.fields(tp)]
        cls = tp

        def record(v: Any) -> Any:
            if not isinstance(v, dict):
                _wrong(v, cls.__name__)
            kwargs = {name: conv(v[name]) for name, conv in fields_ if name in v}
            try:
                return cls(**kwargs)
            except TypeError as e:  # a required field missing
                raise RecordingLineError(f"{cls.__name__}: {e}") from None
        return record
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        def member(v: Any) -> Any:
            if v is None:
                _null(v)
            try:
                return tp(v)
            except (ValueError, TypeError):
                raise RecordingLineError(f"{v!r} is no {tp.__name__}") from None
        return member
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            item = _converter(args[0])

            def items(v: Any) -> Any:
                if not isinstance(v, list):
                    _wrong(v, "a list")
                return tuple([item(x) for x in v])
            return items
        convs = [_converter(a) for a in args]

        def fixed(v: Any) -> Any:
            if not isinstance(v, list):
                _wrong(v, "a list")
            if len(v) != len(convs):
                raise RecordingLineError(f"{len(v)} items where {len(convs)} belong")
            return tuple(c(x) for c, x in zip(convs, v, strict=True))
        if len(convs) != 2:
            return fixed
        first, second = convs

        def pair(v: Any) -> Any:  # the (context, tok/s) pairs of a ceiling curve: many in every line
            if type(v) is list and len(v) == 2:
                return first(v[0]), second(v[1])
            return fixed(v)
        return pair
    if origin in (Mapping, dict, typing.Mapping, typing.Dict):  # noqa: UP006
        args = typing.get_args(tp)
        val = _converter(args[1] if len(args) == 2 else Any)

        def mapping(v: Any) -> Any:
            if not isinstance(v, dict):
                _wrong(v, "an object")
            return {clean_text(k): val(x) for k, x in v.items()}
        return mapping
    return lambda v: _null(v) if v is None else v
