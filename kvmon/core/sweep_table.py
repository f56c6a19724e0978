"""A sweep's result as the seeds' table (text), CSV and JSON, and read back from its JSON (``kvmon compare``).

The JSON document is documented in docs/sweep.md; a file that is not one gets a clear error (``SweepFileError``).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import asdict, fields
from typing import Any

from kvmon import __version__
from kvmon.core.curve_config import CurveConfig
from kvmon.core.jsonvals import InputError, parse_json
from kvmon.core.report_json import json_safe
from kvmon.core.sweep import SweepResult, SweepRow
from kvmon.core.units import DASH, fmt_duration, fmt_percent

KIND = "kvmon-sweep"
COLUMNS = tuple(f.name for f in fields(SweepRow))


class SweepFileError(ValueError):
    """A file that is not a kvmon sweep document; the message says what is wrong with it."""


def _num(v: float | None, fmt: str = ",.1f") -> str:
    return DASH if v is None else format(v, fmt)


def aligned(head: Sequence[str], body: Sequence[Sequence[str]]) -> list[str]:
    """A table's lines for a terminal or a picture: each column right-aligned to its widest cell."""
    widths = [max(len(c) for c in col) for col in zip(head, *body, strict=True)]
    return ["  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)) for line in (head, *body)]


def table_lines(rows: Sequence[SweepRow]) -> list[str]:
    """The seeds' table: depth, decode tok/s, % of the shallowest depth's speed, ceiling, efficiency, prefill."""
    head = ("depth", "decode tok/s", "% of first", "ceiling tok/s", "efficiency", "prefill tok/s")
    body = [(f"{r.depth_tokens:,}", _num(r.decode_tok_s), fmt_percent(r.share_of_first) if r.share_of_first else DASH,
             _num(r.ceiling_tok_s), fmt_percent(r.efficiency) if r.efficiency else DASH, _num(r.prefill_tok_s, ",.0f"))
            for r in rows]
    return aligned(head, body)


def summary_lines(r: SweepResult) -> list[str]:
    """What the sweep measured, what it cost, and how it ended."""
    lines = [f"{r.model or 'model'} on {r.server}" + (f" ({r.label})" if r.label else "")]
    lines += table_lines(r.rows)
    read = f"{r.prompt_tokens_read:,} prompt tokens read by the server" if r.prompt_tokens_read is not None else \
        "the server did not say how many prompt tokens it read"
    lines.append(f"{fmt_duration(r.wall_s, approx=False)}; deepest depth {r.depth_reached:,}; {read}")
    if r.outcome != "done":
        lines.append(f"{'cancelled' if r.outcome == 'cancelled' else 'stopped'}: {r.reason or ''}".rstrip(": "))
    lines.extend(r.notes)
    return lines


def csv_text(rows: Iterable[Sequence[object]]) -> str:
    """Rows as CSV, the first naming the columns; None is written as an empty cell."""
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(["" if v is None else v for v in row] for row in rows)
    return out.getvalue()


def to_csv(r: SweepResult) -> str:
    """One row per depth, the columns of ``COLUMNS`` (empty where unknown)."""
    return csv_text([COLUMNS, *([getattr(row, c) for c in COLUMNS] for row in r.rows)])


def to_json(r: SweepResult) -> dict[str, Any]:
    """The sweep as a plain JSON document (docs/sweep.md)."""
    doc = {"kind": KIND, "kvmon_version": __version__, "server": r.server, "backend": r.backend,
           "server_version": r.server_version, "model": r.model, "label": r.label,
           "config": asdict(r.config) if r.config else None, "generate": r.generate,
           "started_unix_s": r.started_unix_s, "wall_s": r.wall_s, "outcome": r.outcome, "reason": r.reason,
           "prompt_tokens_read": r.prompt_tokens_read, "depth_reached": r.depth_reached, "notes": list(r.notes),
           "rows": [{c: getattr(row, c) for c in COLUMNS} for row in r.rows],
           "ceiling_curve": [list(p) for p in r.ceiling_curve]}
    return json_safe(doc)  # type: ignore[no-any-return]  # a mapping comes back a dict


def _opt_num(v: Any, what: str) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise SweepFileError(f"{what} is not a number")
    return float(v)


def from_json(data: Any) -> SweepResult:
    """A sweep read back from its document; raises SweepFileError naming what is wrong."""
    if not isinstance(data, Mapping) or data.get("kind") != KIND:
        raise SweepFileError("not a kvmon sweep (no \"kind\": \"kvmon-sweep\")")
    rows_in = data.get("rows")
    if not isinstance(rows_in, list) or not rows_in:
        raise SweepFileError("a sweep with no rows")
    rows: list[SweepRow] = []
    for i, raw in enumerate(rows_in, 1):
        if not isinstance(raw, Mapping):
            raise SweepFileError(f"row {i} is not an object")
        depth = _opt_num(raw.get("depth_tokens"), f"row {i}'s depth")
        if depth is None or depth < 0:
            raise SweepFileError(f"row {i} has no depth")
        read = _opt_num(raw.get("prompt_tokens_read"), f"row {i}'s prompt tokens")
        rows.append(SweepRow(
            int(depth), _opt_num(raw.get("decode_tok_s"), f"row {i}'s decode speed"),
            _opt_num(raw.get("share_of_first"), f"row {i}'s share"),
            _opt_num(raw.get("ceiling_tok_s"), f"row {i}'s ceiling"),
            _opt_num(raw.get("efficiency"), f"row {i}'s efficiency"),
            _opt_num(raw.get("prefill_tok_s"), f"row {i}'s prefill speed"),
            None if read is None else int(read), int(_opt_num(raw.get("generated"), "generated") or 0),
            "server" if raw.get("timing") == "server" else "stream"))
    curve = tuple((int(p[0]), float(p[1])) for p in data.get("ceiling_curve") or ()
                  if isinstance(p, list) and len(p) == 2 and all(isinstance(x, (int, float)) for x in p))
    config = None
    with suppress(TypeError, ValueError):  # a configuration that is not one: the curve is still read
        config = CurveConfig.from_json(data.get("config"))
    text = {k: data.get(k) if isinstance(data.get(k), str) else None for k in
            ("server", "backend", "server_version", "model", "label", "outcome", "reason")}
    return SweepResult(
        server=text["server"] or "?", backend=text["backend"], server_version=text["server_version"],
        model=text["model"], config=config, generate=int(_opt_num(data.get("generate"), "generate") or 0),
        rows=tuple(rows), ceiling_curve=curve,
        started_unix_s=_opt_num(data.get("started_unix_s"), "the start") or 0.0,
        wall_s=_opt_num(data.get("wall_s"), "the time") or 0.0,
        outcome=text["outcome"] if text["outcome"] in ("done", "cancelled", "failed") else "done",
        reason=text["reason"], prompt_tokens_read=None, label=text["label"] or "")


def read_text(text: str | bytes) -> SweepResult:
    """A sweep from the text of its JSON file."""
    try:
        return from_json(parse_json(text))
    except InputError as exc:
        raise SweepFileError(f"not JSON ({exc})") from None
