"""Two measured curves side by side: each named by what differs between them ("KV q8_0" against "KV f16"), and the
table of both at their common depths. Pure; ``kvmon.app.compare`` reads the curves from sweeps, recordings and the
atlas.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from kvmon.core.backend import backend_of
from kvmon.core.curve_config import CurveConfig, Words, difference_parts
from kvmon.core.sweep import SweepResult, ceiling_at
from kvmon.core.sweep_table import aligned, csv_text

Points = tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class Curve:
    """One measured speed-vs-context curve: its points (depth, decode tok/s), its ceiling, what it was measured on."""

    label: str  # what it is called on the plot and in the table
    points: Points
    ceiling: tuple[tuple[int, float], ...] = ()
    config: CurveConfig | None = None
    source: str = ""  # where it came from, for people ("sweep of 2026-12-01 14:02", a file name, "atlas")
    model: str | None = None


@dataclass(frozen=True)
class CompareRow:
    """One common depth: each curve's speed there (measured, or straight between its two nearest points)."""

    depth_tokens: int
    a_tok_s: float | None
    b_tok_s: float | None
    a_ceiling_tok_s: float | None
    b_ceiling_tok_s: float | None

    @property
    def ratio(self) -> float | None:
        """b's speed over a's."""
        return self.b_tok_s / self.a_tok_s if self.a_tok_s and self.b_tok_s else None


def curve_of_sweep(r: SweepResult) -> Curve:
    """A sweep's measured rows as a curve."""
    pts = tuple((float(row.depth_tokens), row.decode_tok_s) for row in r.rows if row.decode_tok_s)
    return Curve(r.label or (r.config.label() if r.config else r.model or "sweep"), pts, r.ceiling_curve,
                 r.config, "sweep", r.model)


def named(a: Curve, b: Curve, words_of: Words = backend_of) -> tuple[Curve, Curve, str]:
    """The two curves named by what differs between their configurations, and the comparison's title
    ("KV q8_0 vs f16"); curves whose configurations are unknown or the same keep their own names."""
    parts = difference_parts(a.config, b.config, words_of) if a.config and b.config else ()
    if not parts:
        la, lb = a.label, b.label
        if la == lb:
            la, lb = f"{la} ({a.source or 'A'})", f"{lb} ({b.source or 'B'})"
        return replace(a, label=la), replace(b, label=lb), f"{la} vs {lb}"
    title = ", ".join(f"{w} {x} vs {y}".strip() for w, x, y in parts)
    side_a = ", ".join(f"{w} {x}".strip() for w, x, _y in parts)
    side_b = ", ".join(f"{w} {y}".strip() for w, _x, y in parts)
    return replace(a, label=side_a), replace(b, label=side_b), title


def _at(points: Points, depth: float) -> float | None:
    """The curve at ``depth``: its own point there, else straight between its neighbours (None outside it)."""
    own = next((y for x, y in points if abs(x - depth) < 0.5), None)
    return own if own is not None else ceiling_at([(int(x), y) for x, y in points], depth)


def common_rows(a: Curve, b: Curve) -> tuple[CompareRow, ...]:
    """Both curves at the depths where both were measured (each one's own depths within the other's range)."""
    if not a.points or not b.points:
        return ()
    lo = max(a.points[0][0], b.points[0][0])
    hi = min(a.points[-1][0], b.points[-1][0])
    depths = sorted({round(x) for x, _y in (*a.points, *b.points) if lo - 0.5 <= x <= hi + 0.5})
    return tuple(CompareRow(d, _at(a.points, d), _at(b.points, d), ceiling_at(a.ceiling, d), ceiling_at(b.ceiling, d))
                 for d in depths)


def table_lines(a: Curve, b: Curve, rows: Sequence[CompareRow]) -> list[str]:
    """The table of both at the common depths, for a terminal or the picture."""
    def num(v: float | None) -> str:
        return "—" if v is None else f"{v:,.1f}"

    head = ("depth", f"{a.label} tok/s", f"{b.label} tok/s", "ratio")
    body = [(f"{r.depth_tokens:,}", num(r.a_tok_s), num(r.b_tok_s), "—" if r.ratio is None else f"{r.ratio:.2f}×")
            for r in rows]
    return aligned(head, body)


def to_csv(a: Curve, b: Curve, rows: Sequence[CompareRow]) -> str:
    """The common depths as CSV: each curve's speed and ceiling (named by their labels in the first row)."""
    head = ["depth_tokens", f"{a.label} decode_tok_s", f"{b.label} decode_tok_s", f"{a.label} ceiling_tok_s",
            f"{b.label} ceiling_tok_s"]
    body = [[r.depth_tokens, *(v if v is None else round(v, 4)
                               for v in (r.a_tok_s, r.b_tok_s, r.a_ceiling_tok_s, r.b_ceiling_tok_s))] for r in rows]
    return csv_text([head, *body])
