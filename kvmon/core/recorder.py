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
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from kvmon import __version__
from kvmon.core.jsonvals import MAX_INT, InputError, clean_text, parse_json
from kvmon.core.snapshot import Activity, ConnectionStatus, Snapshot
from kvmon.core.verdict import decided

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
    return _converter(tp)(value)


_Convert = Callable[[Any], Any]
_CONVERTERS: dict[Any, _Convert] = {}


def _converter(tp: Any) -> _Convert:
    """The function that rebuilds a ``tp`` from plain JSON, made once per type (a replay reads every line)."""
    conv = _CONVERTERS.get(tp)
    if conv is None:
        conv = _CONVERTERS[tp] = _make_converter(tp)
    return conv


def _null(_value: Any) -> Any:
    raise RecordingLineError("null where a value belongs")


def _make_converter(tp: Any) -> _Convert:
    if tp is Any:
        return lambda v: v
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        optional = type(None) in args
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            inner = _converter(rest[0])

            def one(v: Any) -> Any:
                if v is None:
                    if optional:
                        return None
                    raise RecordingLineError("null where a value belongs")
                return inner(v)
            return one
        choices = [(a, _converter(a)) for a in rest]
        last = choices[-1][1]

        def union(v: Any) -> Any:
            if v is None:
                if optional:
                    return None
                raise RecordingLineError("null where a value belongs")
            for a, conv in choices:  # e.g. int | float: JSON's own type, when one fits
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
        def boolean(v: Any) -> Any:
            if isinstance(v, bool):
                return v
            if v is None:
                _null(v)
            raise RecordingLineError(f"{type(v).__name__} where a bool belongs")
        return boolean
    if tp is str:
        def text(v: Any) -> Any:
            if isinstance(v, str):
                return clean_text(v)
            if v is None:
                _null(v)
            raise RecordingLineError(f"{type(v).__name__} where text belongs")
        return text
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        hints = _hints(tp)
        fields_ = [(f.name, _converter(hints[f.name])) for f in dataclasses.fields(tp)]
        cls = tp

        def record(v: Any) -> Any:
            if v is None:
                _null(v)
            if not isinstance(v, dict):
                raise RecordingLineError(f"{type(v).__name__} where {cls.__name__} belongs")
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
                    if v is None:
                        _null(v)
                    raise RecordingLineError(f"{type(v).__name__} where a list belongs")
                return tuple([item(x) for x in v])
            return items
        convs = [_converter(a) for a in args]

        def fixed(v: Any) -> Any:
            if not isinstance(v, list):
                if v is None:
                    _null(v)
                raise RecordingLineError(f"{type(v).__name__} where a list belongs")
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
                if v is None:
                    _null(v)
                raise RecordingLineError(f"{type(v).__name__} where an object belongs")
            return {clean_text(k): val(x) for k, x in v.items()}
        return mapping
    return lambda v: _null(v) if v is None else v


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
    if "verdict" not in data:  # recorded before the verdict was: decided once from what the line holds
        snap = decided(snap)
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
    snapshots: Sequence[Snapshot]  # a tuple, or with ``lazy`` the file's RecordedSnapshots
    skipped_lines: tuple[int, ...] = ()  # 1-based line numbers
    reasons: tuple[str, ...] = field(default=())


def _lines(fh: IO[bytes]) -> Iterator[tuple[int, str, bool]]:
    """(offset, line, whole) for each line: one longer than MAX_LINE_CHARS comes as "" and not whole, unread past
    the limit. Bytes that are not UTF-8 read as U+FFFD."""
    while True:
        offset = fh.tell()
        raw = fh.readline(MAX_LINE_CHARS + 1)
        if not raw:
            return
        if len(raw) > MAX_LINE_CHARS and not raw.endswith(b"\n"):
            while (rest := fh.readline(MAX_LINE_CHARS + 1)) and not rest.endswith(b"\n"):
                pass
            yield offset, "", False
            continue
        yield offset, raw.decode("utf-8", errors="replace"), True


def _open(p: Path) -> IO[bytes]:
    try:
        return p.open("rb")
    except OSError as exc:
        raise RecordingError(f"cannot open recording {p.name}: {exc.strerror or exc}") from None


def _line_snapshot(n: int, line: str, whole: bool) -> tuple[Snapshot | None, str | None]:
    """Line ``n`` as a Snapshot, or None with the reason it is skipped."""
    if not whole:
        return None, f"line {n}: longer than {MAX_LINE_CHARS // (1024 * 1024)} MiB, not read"
    if not line.endswith("\n"):
        return None, f"line {n}: incomplete (the recording was cut off)"
    try:
        return snapshot_from_dict(parse_json(line)), None
    except (InputError, RecordingLineError) as exc:
        return None, f"line {n}: not a snapshot ({exc})"


def _scan(path: str | Path) -> Iterator[tuple[int, int, Snapshot | None, str | None]]:
    """(line number, offset, Snapshot or None, reason) for every line; line 1 is the header (its JSON as the
    reason). Raises RecordingError for a file that is not a recording."""
    p = Path(path)
    with _open(p) as fh:
        first = fh.readline(MAX_LINE_CHARS).decode("utf-8", errors="replace")
        try:
            header = parse_json(first)
        except InputError:
            header = None
        if not isinstance(header, dict) or HEADER_KEY not in header:
            raise RecordingError(f"{p.name} is not a kvmon recording (no header line)")
        if not isinstance(header[HEADER_KEY], int) or header[HEADER_KEY] > SCHEMA_VERSION:
            raise RecordingError(f"{p.name} has recording schema {header[HEADER_KEY]!r}; "
                                 f"this kvmon reads up to {SCHEMA_VERSION}")
        yield 1, 0, None, json.dumps(header)
        for n, (offset, line, whole) in enumerate(_lines(fh), start=2):
            snap, why = _line_snapshot(n, line, whole)
            yield n, offset, snap, why


def iter_recording(path: str | Path) -> Iterator[tuple[int, Snapshot | None, str | None]]:
    """(line number, Snapshot or None, reason) for every line after the header; raises RecordingError."""
    for n, _offset, snap, why in _scan(path):
        yield n, snap, why


def read_recording(path: str | Path, *, lazy: bool = False,
                   each: Callable[[Snapshot], None] | None = None) -> Recording:
    """Every complete, well-formed Snapshot in the file, plus which lines were skipped and why.

    ``lazy``: the snapshots stay in the file (``RecordedSnapshots``: each read again when asked), so a day's
    recording costs a few bytes a line in memory instead of its Snapshots; every line is still read once here.
    ``each``: called with every Snapshot as it is read (a replay fills its window in the same pass).
    """
    header: Mapping[str, Any] = {}
    snaps: list[Snapshot] = []
    offsets, lines, times, codes = array("q"), array("q"), array("d"), array("I")
    code_sets: dict[frozenset[str], int] = {}
    skipped: list[int] = []
    reasons: list[str] = []
    for n, offset, snap, why in _scan(path):
        if n == 1:
            header = json.loads(why or "{}")
            continue
        if snap is None:
            skipped.append(n)
            reasons.append(why or f"line {n}")
            continue
        if each is not None:
            each(snap)
        if lazy:
            offsets.append(offset)
            lines.append(n)
            times.append(snap.t_wall)
            codes.append(code_sets.setdefault(frozenset(a.code for a in snap.alerts), len(code_sets)))
        else:
            snaps.append(snap)
    held: Sequence[Snapshot] = (RecordedSnapshots(Path(path), offsets, lines, times, codes, tuple(code_sets))
                                if lazy else tuple(snaps))
    return Recording(header=header, snapshots=held, skipped_lines=tuple(skipped), reasons=tuple(reasons))


class RecordedSnapshots(Sequence[Snapshot]):
    """A recording's Snapshots left in its file: each read again when asked (a slice is another such view).

    What a replay needs without reading them (each one's time and alert codes) is kept beside the line offsets.
    A file changed on disk since it was read raises RecordingError for the line that no longer reads.
    """

    def __init__(self, path: Path, offsets: array[int], lines: array[int], times: array[float],
                 codes: array[int], code_sets: tuple[frozenset[str], ...]) -> None:
        self.path = path
        self._offsets, self._lines, self._times, self._codes = offsets, lines, times, codes
        self._code_sets = code_sets

    def __len__(self) -> int:
        return len(self._offsets)

    @typing.overload
    def __getitem__(self, i: int) -> Snapshot: ...

    @typing.overload
    def __getitem__(self, i: slice) -> RecordedSnapshots: ...

    def __getitem__(self, i: int | slice) -> Snapshot | RecordedSnapshots:
        if isinstance(i, slice):
            return RecordedSnapshots(self.path, self._offsets[i], self._lines[i], self._times[i], self._codes[i],
                                     self._code_sets)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError("recorded snapshot index out of range")
        with _open(self.path) as fh:
            return self._read(fh, i)

    def __iter__(self) -> Iterator[Snapshot]:
        if not len(self):
            return
        with _open(self.path) as fh:
            for i in range(len(self)):
                yield self._read(fh, i)

    def _read(self, fh: IO[bytes], i: int) -> Snapshot:
        fh.seek(self._offsets[i])
        got = next(_lines(fh), None)  # None: the file is shorter now
        line, whole = (got[1], got[2]) if got is not None else ("", True)
        snap, why = _line_snapshot(self._lines[i], line, whole)
        if snap is None:
            raise RecordingError(f"{self.path.name} changed on disk since it was opened: {why}")
        return snap

    @property
    def times(self) -> Sequence[float]:
        """Each snapshot's wall-clock time (Unix seconds), without reading it."""
        return self._times

    def alert_codes(self, i: int) -> frozenset[str]:
        """The codes of snapshot ``i``'s alerts, without reading it."""
        return self._code_sets[self._codes[i]]
