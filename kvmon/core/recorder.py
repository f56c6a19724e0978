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
import errno
import json
import math
import os
import stat
import time
import typing
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from kvmon import __version__
from kvmon.core.jsonvals import InputError, parse_json
from kvmon.core.plain_values import RecordingLineError, from_plain, to_plain
from kvmon.core.snapshot import Activity, ConnectionStatus, Snapshot
from kvmon.core.verdict import decided

SCHEMA_VERSION = 1
HEADER_KEY = "kvmon_recording"
MAX_LINE_CHARS = 16 * 1024 * 1024  # a snapshot line is a few KB; a longer one is skipped unread
MAX_HEADER_BYTES = 64 * 1024
MAX_REPORTED = 1000  # unreadable lines kept by number and reason (all are counted)
MAX_T_WALL = 1e11  # Unix seconds: past the year 5000, no clock a snapshot came from


class RecordingError(ValueError):
    """A file that is not a kvmon recording (or one of a newer, unknown schema)."""


class RecordingRefused(OSError):
    """``--record`` to a path kvmon will not append to: a file that is not a kvmon recording, a symbolic link, a
    folder, a FIFO or a socket. An OSError, so that every "cannot record" path reports it the same way."""

    def __init__(self, path: str | Path, why: str) -> None:
        super().__init__(errno.EINVAL, why, str(path))


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
    """Appends Snapshots to a JSONL file, one flushed line each.

    Only to a new file, an empty one, or a kvmon recording of this schema (never through a symbolic link): anything
    else raises RecordingRefused. A recording whose last line was cut off (a killed process) gets its next
    snapshot on a line of its own. Raises OSError when the file cannot be opened or its first line written.
    """

    def __init__(self, path: str | Path, *, source_url: str | None = None) -> None:
        self.path = Path(path)
        fd = _open_for_recording(self.path)
        try:
            torn = _check_appendable(fd, self.path)
            # backslashreplace: a lone surrogate that slipped past the sources is written as its JSON escape (read
            # back as U+FFFD) instead of stopping the recording
            self._fh: IO[str] | None = os.fdopen(fd, "a", encoding="utf-8", errors="backslashreplace")
        except BaseException:
            os.close(fd)
            raise
        try:
            if torn:
                self._fh.write("\n")  # the cut line stays incomplete (skipped on replay); the next starts afresh
                self._fh.flush()
            if os.fstat(fd).st_size == 0:
                header = {HEADER_KEY: SCHEMA_VERSION, "kvmon_version": __version__,
                          "created_wall": time.time(), "url": source_url}
                self._write(header)
        except BaseException:
            self.close_quietly()
            raise

    def close_quietly(self) -> None:
        """Close a file whose last flush may fail (a full disk)."""
        try:
            self.close()
        except OSError:
            self._fh = None

    def _write(self, obj: Mapping[str, Any]) -> None:
        assert self._fh is not None
        self._fh.write(json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":")) + "\n")
        self._fh.flush()

    def record(self, snap: Snapshot) -> None:
        """Write one Snapshot as one line and flush it."""
        if self._fh is None:
            raise ValueError("recorder is closed")
        self._write(snapshot_to_dict(snap))

    def close(self) -> None:
        """Close the file; every recorded line is already on disk."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_RECORD_FLAGS = (os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
                 | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0))


def _open_for_recording(path: Path) -> int:
    """The file to record to, opened for appending: never through a symbolic link, never waiting for a FIFO."""
    if path.is_symlink():
        raise RecordingRefused(path, "it is a symbolic link: kvmon records only to a file of its own")
    try:
        fd = os.open(path, _RECORD_FLAGS, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise RecordingRefused(path, "it is a symbolic link: kvmon records only to a file of its own") from None
        if e.errno in (errno.ENXIO, errno.EISDIR):  # a FIFO nobody reads, a folder
            raise RecordingRefused(path, "it is not a file") from None
        raise
    os.set_blocking(fd, True)
    return fd


def _header(line: bytes | str) -> dict[str, Any] | None:
    """The recording header on ``line``, or None when it holds none."""
    try:
        header = parse_json(line)
    except InputError:
        return None
    return header if isinstance(header, dict) and HEADER_KEY in header else None


def _check_appendable(fd: int, path: Path) -> bool:
    """Refuse what is not a file kvmon may append snapshots to; whether its last line was cut off."""
    st = os.fstat(fd)
    if stat.S_ISCHR(st.st_mode):
        return False  # /dev/null: nothing to read back; /dev/full: the first write says the disk is full
    if not stat.S_ISREG(st.st_mode):
        raise RecordingRefused(path, "it is not a file (a FIFO, a socket or a folder)")
    if st.st_size == 0:
        return False
    header = _header(os.pread(fd, MAX_HEADER_BYTES, 0).split(b"\n", 1)[0])
    if header is None:
        raise RecordingRefused(path, "it is not a kvmon recording: not appending snapshots to it")
    if header[HEADER_KEY] != SCHEMA_VERSION:
        raise RecordingRefused(path, f"it is a recording of schema {header[HEADER_KEY]!r}; this kvmon writes "
                                     f"{SCHEMA_VERSION}")
    return os.pread(fd, 1, st.st_size - 1) != b"\n"


@dataclass(frozen=True)
class Recording:
    """A recording read back: its header, the Snapshots, and the lines that could not be read."""

    header: Mapping[str, Any]
    snapshots: Sequence[Snapshot]  # a tuple, or with ``lazy`` the file's RecordedSnapshots
    skipped_lines: tuple[int, ...] = ()  # 1-based line numbers (the first MAX_REPORTED)
    reasons: tuple[str, ...] = field(default=())  # (the first MAX_REPORTED)
    skipped_count: int = 0  # every line that could not be read (blank lines are not counted: they hold nothing)


def _lines(fh: IO[bytes], lineno: int = 1) -> Iterator[tuple[int, int, str, bool]]:
    """(line number, offset, line, whole) for each line from the file's position on (numbered from ``lineno``),
    blank lines passed over at the cost of reading them (they hold nothing, and a file may hold millions); one
    longer than MAX_LINE_CHARS comes as "" and not whole, unread past the limit. Bytes that are not UTF-8 read as
    U+FFFD."""
    offset = fh.tell()
    n = lineno - 1
    readline = fh.readline
    while raw := readline(MAX_LINE_CHARS + 1):
        n += 1
        at, offset = offset, offset + len(raw)
        if raw.isspace():
            continue
        if len(raw) > MAX_LINE_CHARS and not raw.endswith(b"\n"):
            while (rest := readline(MAX_LINE_CHARS + 1)) and not rest.endswith(b"\n"):
                offset += len(rest)
            offset += len(rest)
            yield n, at, "", False
            continue
        yield n, at, raw.decode("utf-8", errors="replace"), True


_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)


def _open(p: Path) -> IO[bytes]:
    """The recording at ``p`` for reading: a regular file only, opened without waiting (a FIFO would block open()
    and every read for as long as nobody writes to it; a device may never end)."""
    try:
        fd = os.open(p, _READ_FLAGS)
    except OSError as exc:
        raise RecordingError(f"cannot open recording {p.name}: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise RecordingError(f"{p.name} is not a recording file (a FIFO, a device, a socket or a folder)")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


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
        header = _header(fh.readline(MAX_LINE_CHARS).decode("utf-8", errors="replace"))
        if header is None:
            raise RecordingError(f"{p.name} is not a kvmon recording (no header line)")
        if not isinstance(header[HEADER_KEY], int) or header[HEADER_KEY] > SCHEMA_VERSION:
            raise RecordingError(f"{p.name} has recording schema {header[HEADER_KEY]!r}; "
                                 f"this kvmon reads up to {SCHEMA_VERSION}")
        yield 1, 0, None, json.dumps(header)
        for n, offset, line, whole in _lines(fh, 2):
            snap, why = _line_snapshot(n, line, whole)
            yield n, offset, snap, why


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
    skipped_count = 0
    for n, offset, snap, why in _scan(path):
        if n == 1:
            header = json.loads(why or "{}")
            continue
        if snap is None:
            skipped_count += 1
            if len(skipped) < MAX_REPORTED:  # a file of a million bad lines costs a count, not a million reasons
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
    return Recording(header=header, snapshots=held, skipped_lines=tuple(skipped), reasons=tuple(reasons),
                     skipped_count=skipped_count)


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
        line, whole = (got[2], got[3]) if got is not None else ("", True)
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
