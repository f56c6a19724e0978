"""JSONL recording of Snapshots, and reading them back for replay.

Line 1 is a header (``{"kvmon_recording": SCHEMA_VERSION, ...}``); every further line is one Snapshot
as a dict. Each line is written with one ``write`` and flushed, so a killed process leaves every
complete line readable. ``snapshot_to_dict``/``snapshot_from_dict`` round-trip a Snapshot exactly.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import time
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from kvmon import __version__
from kvmon.core.snapshot import Snapshot

SCHEMA_VERSION = 1
HEADER_KEY = "kvmon_recording"


class RecordingError(ValueError):
    """A file that is not a kvmon recording (or one of a newer, unknown schema)."""


def _encode_float(x: float) -> Any:
    # JSON has no NaN/Infinity; keep them as tagged strings so the round trip stays exact.
    if math.isfinite(x):
        return x
    return {"__float__": repr(x)}


def to_plain(value: Any) -> Any:
    """A dataclass/enum/tuple/mapping tree as JSON-ready plain values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)
                if not f.metadata.get("transient")}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, float):
        return _encode_float(value)
    if isinstance(value, Mapping):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [to_plain(v) for v in value]
    return value


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    h = _HINTS.get(cls)
    if h is None:
        h = _HINTS[cls] = typing.get_type_hints(cls)
    return h


def from_plain(tp: Any, value: Any) -> Any:
    """Rebuild a value of type ``tp`` (as annotated on the Snapshot dataclasses) from plain JSON."""
    if value is None:
        return None
    if isinstance(value, dict) and set(value) == {"__float__"}:
        return float(value["__float__"])
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return from_plain(args[0], value)
        for a in args:  # e.g. int | float: keep JSON's own type
            if isinstance(a, type) and isinstance(value, a):
                return value
        return value
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        hints = _hints(tp)
        kwargs = {}
        for f in dataclasses.fields(tp):
            if f.name in value:
                kwargs[f.name] = from_plain(hints[f.name], value[f.name])
        return tp(**kwargs)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(value)
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_plain(args[0], v) for v in value)
        return tuple(from_plain(a, v) for a, v in zip(args, value, strict=False))
    if origin in (Mapping, dict, typing.Mapping, typing.Dict):  # noqa: UP006
        args = typing.get_args(tp)
        vt = args[1] if len(args) == 2 else Any
        return {k: from_plain(vt, v) for k, v in value.items()}
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def snapshot_to_dict(snap: Snapshot) -> dict[str, Any]:
    """A Snapshot as a JSON-ready dict (exact: floats keep every digit, NaN/inf are tagged)."""
    return typing.cast(dict[str, Any], to_plain(snap))


def snapshot_from_dict(data: Mapping[str, Any]) -> Snapshot:
    """The inverse of ``snapshot_to_dict``; unknown keys (from a newer kvmon) are ignored."""
    return typing.cast(Snapshot, from_plain(Snapshot, dict(data)))


class Recorder:
    """Appends Snapshots to a JSONL file, one flushed line each."""

    def __init__(self, path: str | Path, *, source_url: str | None = None) -> None:
        self.path = Path(path)
        self._fh: IO[str] | None = self.path.open("a", encoding="utf-8")
        self.lines_written = 0
        if self._fh.tell() == 0:
            header = {HEADER_KEY: SCHEMA_VERSION, "kvmon_version": __version__,
                      "created_wall": time.time(), "url": source_url}
            self._write(header)

    def _write(self, obj: Mapping[str, Any]) -> None:
        assert self._fh is not None
        self._fh.write(json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":")) + "\n")
        self._fh.flush()

    def record(self, snap: Snapshot) -> None:
        """Write one Snapshot as one line and flush it."""
        if self._fh is None:
            raise ValueError("recorder is closed")
        self._write(snapshot_to_dict(snap))
        self.lines_written += 1

    def close(self) -> None:
        """Close the file; every recorded line is already on disk."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class Recording:
    """A recording read back: its header, the Snapshots, and the lines that could not be read."""

    header: Mapping[str, Any]
    snapshots: tuple[Snapshot, ...]
    skipped_lines: tuple[int, ...] = ()  # 1-based line numbers
    reasons: tuple[str, ...] = field(default=())


def iter_recording(path: str | Path) -> Iterator[tuple[int, Snapshot | None, str | None]]:
    """(line number, Snapshot or None, reason) for every line after the header; raises RecordingError."""
    p = Path(path)
    try:
        fh = p.open("r", encoding="utf-8", errors="replace")
    except OSError as exc:
        raise RecordingError(f"cannot open recording {p.name}: {exc.strerror or exc}") from None
    with fh:
        first = fh.readline()
        try:
            header = json.loads(first)
        except ValueError:
            header = None
        if not isinstance(header, dict) or HEADER_KEY not in header:
            raise RecordingError(f"{p.name} is not a kvmon recording (no header line)")
        if not isinstance(header[HEADER_KEY], int) or header[HEADER_KEY] > SCHEMA_VERSION:
            raise RecordingError(f"{p.name} has recording schema {header[HEADER_KEY]!r}; "
                                 f"this kvmon reads up to {SCHEMA_VERSION}")
        yield 1, None, json.dumps(header)
        for n, line in enumerate(fh, start=2):
            if not line.endswith("\n"):
                yield n, None, f"line {n}: incomplete (the recording was cut off)"
                continue
            try:
                yield n, snapshot_from_dict(json.loads(line)), None
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                yield n, None, f"line {n}: not a snapshot ({type(exc).__name__})"


def read_recording(path: str | Path) -> Recording:
    """Every complete, well-formed Snapshot in the file, plus which lines were skipped and why."""
    header: Mapping[str, Any] = {}
    snaps: list[Snapshot] = []
    skipped: list[int] = []
    reasons: list[str] = []
    for n, snap, why in iter_recording(path):
        if n == 1:
            header = json.loads(why or "{}")
        elif snap is not None:
            snaps.append(snap)
        else:
            skipped.append(n)
            reasons.append(why or f"line {n}")
    return Recording(header=header, snapshots=tuple(snaps), skipped_lines=tuple(skipped), reasons=tuple(reasons))
