"""A recording (or any sequence of Snapshots) as CSV: one row per snapshot, for spreadsheets and plotting tools.

Unknown values are empty cells, never 0. The server URL is written without credentials or query string.
"""

from __future__ import annotations

import csv
import io
import math
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from kvmon.core.fields import CSV_FIELDS
from kvmon.core.snapshot import Snapshot


def _redact(url: str | None) -> str | None:
    if not url:
        return url
    from urllib.parse import urlsplit, urlunsplit

    try:
        p = urlsplit(url)
        host = p.hostname or ""
        netloc = f"[{host}]" if ":" in host else host
        if p.port:
            netloc += f":{p.port}"
        return urlunsplit((p.scheme, netloc, p.path, "", ""))
    except ValueError:
        return "<invalid URL>"


# column name → value of one snapshot
COLUMNS: tuple[tuple[str, Callable[[Snapshot], Any]], ...] = (
    ("seq", lambda s: s.seq),
    ("t_wall", lambda s: s.t_wall),
    ("time_utc", lambda s: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(s.t_wall))),
    ("t_monotonic", lambda s: s.t_monotonic),
    ("status", lambda s: s.connection.status.value),
    ("backend", lambda s: s.backend),
    ("url", lambda s: _redact(s.url)),
    ("model", lambda s: s.model.name),
    *((f.name, f.get) for f in CSV_FIELDS),  # the readings, as described once (kvmon.core.fields)
    ("alerts", lambda s: " ".join(f"{a.level.value}:{a.code}" for a in s.alerts)),
)
HEADER = tuple(name for name, _ in COLUMNS)


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ""
    return str(v)


def rows(snapshots: Iterable[Snapshot]) -> Iterable[list[str]]:
    """The CSV rows (as strings) of each snapshot, in ``HEADER`` order."""
    for s in snapshots:
        yield [_cell(fn(s)) for _, fn in COLUMNS]


def to_csv_text(snapshots: Sequence[Snapshot]) -> str:
    """The whole CSV document as text."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(HEADER)
    w.writerows(rows(snapshots))
    return buf.getvalue()


def write_csv(snapshots: Iterable[Snapshot], path: str | Path) -> int:
    """Write the CSV to ``path``; returns the number of data rows; raises OSError when it cannot write."""
    n = 0
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(HEADER)
        for row in rows(snapshots):
            w.writerow(row)
            n += 1
    return n
