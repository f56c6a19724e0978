"""JSONL recording of Snapshots, and reading them back for replay.

Line 1 is a header (``{"kvmon_recording": SCHEMA_VERSION, ...}``); every further line is one Snapshot
as a dict. Each line is written with one ``write`` and flushed, so a killed process leaves every
complete line readable. ``snapshot_to_dict``/``snapshot_from_dict`` round-trip a Snapshot exactly.

A recording read back is outside input (it may have been cut, edited or made by someone else): each line is parsed
by ``kvmon.core.jsonvals.parse_json`` and rebuilt against the Snapshot's type annotations, so a value of the wrong
type, an integer past 64 bits, a clock no calendar holds or nesting without end makes that one line a
``RecordingLineError``, skipped and counted, never a traceback.
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
from kvmon.core.jsonvals import MAX_INT, InputError, clean_text, parse_json
from kvmon.core.snapshot import Activity, ConnectionStatus, Snapshot

SCHEMA_VERSION = 1
HEADER_KEY = "kvmon_recording"
MAX_LINE_CHARS = 16 * 1024 * 1024  # a snapshot line is a few KB; a longer one is skipped unread
MAX_T_WALL = 1e11  # Unix seconds: past the year 5000, no clock a snapshot came from
_FLOAT_TAGS = frozenset({"nan", "inf", "-inf"})


class RecordingError(ValueError):
    """A file that is not a kvmon recording (or one of a newer, unknown schema)."""


class RecordingLineError(ValueError):
    """One line of a recording that is not a snapshot this kvmon can rebuild: skipped, with this as the reason."""


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
    if tp is Any:
        return value
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None:
            if type(None) in args:
                return None
            raise RecordingLineError("null where a value belongs")
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return from_plain(rest[0], value)
        for a in rest:  # e.g. int | float: JSON's own type, when one fits
            if isinstance(a, type) and isinstance(value, a) and not isinstance(value, bool):
                return from_plain(a, value)
        return from_plain(rest[-1], value)
    if value is None:
        raise RecordingLineError("null where a value belongs")
    if tp in (int, float):
        return _number(tp, value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise RecordingLineError(f"{type(value).__name__} where a bool belongs")
    if tp is str:
        if isinstance(value, str):
            return clean_text(value)
        raise RecordingLineError(f"{type(value).__name__} where text belongs")
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, dict):
            raise RecordingLineError(f"{type(value).__name__} where {tp.__name__} belongs")
        hints = _hints(tp)
        kwargs = {f.name: from_plain(hints[f.name], value[f.name]) for f in dataclasses.fields(tp) if f.name in value}
        try:
            return tp(**kwargs)
        except TypeError as e:  # a required field missing
            raise RecordingLineError(f"{tp.__name__}: {e}") from None
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except (ValueError, TypeError):
            raise RecordingLineError(f"{value!r} is no {tp.__name__}") from None
    if origin is tuple:
        if not isinstance(value, list):
            raise RecordingLineError(f"{type(value).__name__} where a list belongs")
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_plain(args[0], v) for v in value)
        if len(value) != len(args):
            raise RecordingLineError(f"{len(value)} items where {len(args)} belong")
        return tuple(from_plain(a, v) for a, v in zip(args, value, strict=True))
    if origin in (Mapping, dict, typing.Mapping, typing.Dict):  # noqa: UP006
        if not isinstance(value, dict):
            raise RecordingLineError(f"{type(value).__name__} where an object belongs")
        args = typing.get_args(tp)
        vt = args[1] if len(args) == 2 else Any
        return {clean_text(k): from_plain(vt, v) for k, v in value.items()}
    return value


def snapshot_to_dict(snap: Snapshot) -> dict[str, Any]:
    """A Snapshot as a JSON-ready dict (exact: floats keep every digit, NaN/inf are tagged)."""
    return typing.cast(dict[str, Any], to_plain(snap))


def snapshot_from_dict(data: Mapping[str, Any]) -> Snapshot:
    """The inverse of ``snapshot_to_dict``; unknown keys (from a newer kvmon) are ignored.

    Raises RecordingLineError for data that is not a snapshot (see ``from_plain``), or whose clocks no poll had.
    """
    if not isinstance(data, Mapping):
        raise RecordingLineError(f"{type(data).__name__} where a snapshot belongs")
    snap = typing.cast(Snapshot, from_plain(Snapshot, dict(data)))
    if "activity" not in data:  # recorded before the activity was: read once from what those files say
        snap = dataclasses.replace(snap, activity=_recorded_activity(snap))
    if not (math.isfinite(snap.t_wall) and 0.0 <= snap.t_wall <= MAX_T_WALL):
        raise RecordingLineError(f"t_wall {snap.t_wall!r} is no time a snapshot was taken")
    if not math.isfinite(snap.t_monotonic):
        raise RecordingLineError(f"t_monotonic {snap.t_monotonic!r} is no clock reading")
    return snap


def _recorded_activity(s: Snapshot) -> Activity | None:
    """The activity of a snapshot recorded without one (its decode rate, connection and the idle reason)."""
    if s.connection.status is ConnectionStatus.LOADING:
        return Activity.LOADING
    if not s.server_read:
        return None
    if s.decode_tok_s is not None:
        return Activity.DECODING
    return Activity.IDLE if str(s.reasons.get("decode_tok_s", "")).startswith("idle") else Activity.UNKNOWN


class Recorder:
    """Appends Snapshots to a JSONL file, one flushed line each."""

    def __init__(self, path: str | Path, *, source_url: str | None = None) -> None:
        self.path = Path(path)
        # backslashreplace: a lone surrogate that slipped past the sources is written as its JSON escape (read back
        # as U+FFFD) instead of stopping the recording
        self._fh: IO[str] | None = self.path.open("a", encoding="utf-8", errors="backslashreplace")
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


def _lines(fh: IO[str]) -> Iterator[tuple[str, bool]]:
    """(line, whole) for each line: one longer than MAX_LINE_CHARS comes as ("", False), unread past the limit."""
    while True:
        line = fh.readline(MAX_LINE_CHARS + 1)
        if not line:
            return
        if len(line) > MAX_LINE_CHARS and not line.endswith("\n"):
            while (rest := fh.readline(MAX_LINE_CHARS + 1)) and not rest.endswith("\n"):
                pass
            yield "", False
            continue
        yield line, True


def iter_recording(path: str | Path) -> Iterator[tuple[int, Snapshot | None, str | None]]:
    """(line number, Snapshot or None, reason) for every line after the header; raises RecordingError."""
    p = Path(path)
    try:
        fh = p.open("r", encoding="utf-8", errors="replace")
    except OSError as exc:
        raise RecordingError(f"cannot open recording {p.name}: {exc.strerror or exc}") from None
    with fh:
        first = fh.readline(MAX_LINE_CHARS)
        try:
            header = parse_json(first)
        except InputError:
            header = None
        if not isinstance(header, dict) or HEADER_KEY not in header:
            raise RecordingError(f"{p.name} is not a kvmon recording (no header line)")
        if not isinstance(header[HEADER_KEY], int) or header[HEADER_KEY] > SCHEMA_VERSION:
            raise RecordingError(f"{p.name} has recording schema {header[HEADER_KEY]!r}; "
                                 f"this kvmon reads up to {SCHEMA_VERSION}")
        yield 1, None, json.dumps(header)
        for n, (line, whole) in enumerate(_lines(fh), start=2):
            if not whole:
                yield n, None, f"line {n}: longer than {MAX_LINE_CHARS // (1024 * 1024)} MiB, not read"
                continue
            if not line.endswith("\n"):
                yield n, None, f"line {n}: incomplete (the recording was cut off)"
                continue
            try:
                yield n, snapshot_from_dict(parse_json(line)), None
            except (InputError, RecordingLineError) as exc:
                yield n, None, f"line {n}: not a snapshot ({exc})"


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
