"""A Snapshot with every field set, at every depth, to a value other than its default, made from the type
annotations: a field added to the Snapshot (or to any structure in it) is filled here without a line of test code,
so the recording round trip and the once --json schema doc are checked for it."""

from __future__ import annotations

import dataclasses
import enum
import itertools
import types
import typing
from collections.abc import Mapping
from typing import Any

from kvmon.core.snapshot import Snapshot

_counter = itertools.count(1)


def value_of(tp: Any, name: str = "x") -> Any:
    """A value of the annotated type ``tp``, never None and never the type's zero (each call a new one)."""
    n = next(_counter)
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return value_of(next(a for a in typing.get_args(tp) if a is not type(None)), name)
    if origin is typing.Literal:
        return typing.get_args(tp)[-1]
    if tp is Any:
        return {"note": f"{name} {n}", "n": [n, 0.5]}
    if tp is bool:
        return True
    if tp is int:
        return 1000 + n
    if tp is float:
        return n + 0.1 + 0.2  # every digit must come back
    if tp is str:
        return f"{name} {n}"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return list(tp)[-1]
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(value_of(args[0], name) for _ in range(2))
        return tuple(value_of(a, name) for a in args)
    if origin in (Mapping, dict):
        key_tp, val_tp = typing.get_args(tp) or (str, Any)
        return {value_of(key_tp, f"{name} key"): value_of(val_tp, name)}
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return filled(tp)
    raise TypeError(f"no value for {tp!r} ({name}): teach tests/every_field.py this type")


def filled(cls: type) -> Any:
    """An instance of the dataclass ``cls`` with every field set, the live-only (transient) ones too."""
    hints = typing.get_type_hints(cls)
    return cls(**{f.name: value_of(hints[f.name], f.name) for f in dataclasses.fields(cls)})


def every_field_snapshot() -> Snapshot:
    """A Snapshot with every field, at every depth, set."""
    return typing.cast(Snapshot, filled(Snapshot))
