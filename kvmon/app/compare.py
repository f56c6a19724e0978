"""The curves ``kvmon compare`` and File ▸ Compare… put side by side, read from where they were kept: a sweep's JSON
(``kvmon sweep --json``), a recording (``--record``: the points of its last configuration), or a configuration of
the atlas of measured curves (``atlas:N``, N as ``kvmon compare --list`` numbers them). Anything else is a
``CompareError`` that says what is wrong with it.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from kvmon.app.atlas import AtlasError, ConfigSummary, default_atlas
from kvmon.core.compare import Curve, curve_of_sweep
from kvmon.core.curve_identity import snapshot_config
from kvmon.core.points import ContextBins, measured_point
from kvmon.core.recorder import RecordingError, read_recording
from kvmon.core.sweep_table import SweepFileError, from_json, read_text
from kvmon.sources.backends import by_name


class CompareError(ValueError):
    """A curve that cannot be read; the message names it and says why."""


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def atlas_configs() -> list[ConfigSummary]:
    """The atlas's configurations, numbered from 1 in this order by ``atlas:N``."""
    try:
        return default_atlas().configs()
    except AtlasError as exc:
        raise CompareError(f"the atlas of measured curves cannot be read: {exc}") from None


def atlas_lines() -> list[str]:
    """``kvmon compare --list``: each configuration with its number, points, deepest depth, sweeps and when."""
    rows = atlas_configs()
    if not rows:
        return ["the atlas of measured curves is empty: kvmon keeps what it measures while it watches a server, and "
                "what `kvmon sweep` measures"]
    return [f"atlas:{i}  {c.config.label(by_name)}  ({c.points} points to {c.deepest_tokens:,} tokens, {c.sweeps} "
            f"sweep{'s' if c.sweeps != 1 else ''}, last {_when(c.last_t_wall)})" for i, c in enumerate(rows, 1)]


def _from_atlas(spec: str) -> Curve:
    rows = atlas_configs()
    try:
        n = int(spec.split(":", 1)[1])
    except ValueError:
        n = 0
    if not 1 <= n <= len(rows):
        raise CompareError(f"{spec}: no such configuration in the atlas (kvmon compare --list numbers them, 1 to "
                           f"{len(rows)})")
    summary = rows[n - 1]
    view = default_atlas().view(summary.config)
    docs = default_atlas().sweep_docs(summary.id)
    ceiling = from_json(docs[0]).ceiling_curve if docs else ()
    return Curve(summary.config.label(by_name), tuple((p.context_tokens, p.decode_tok_s) for p in view.points),
                 ceiling, summary.config, "atlas", summary.config.model)


def _from_recording(path: Path) -> Curve:
    try:
        rec = read_recording(path)
    except (OSError, RecordingError) as exc:
        raise CompareError(f"{path}: {exc}") from None
    last = next((c for c in map(snapshot_config, reversed(rec.snapshots)) if c is not None), None)
    if last is None:
        raise CompareError(f"{path}: the recording never read a model")
    bins = ContextBins()
    ceiling: tuple[tuple[int, float], ...] = ()
    for s in rec.snapshots:
        if snapshot_config(s) != last:
            continue
        ceiling = s.ceiling_curve or ceiling
        point = measured_point(s.slots, s.context_tokens, s.decode_tok_s, s.decode_rate_source)
        if point is not None:
            bins.add(*point)
    xs, ys = bins.points()
    if not len(xs):
        raise CompareError(f"{path}: no decode speed was measured in its last configuration")
    return Curve(last.label(by_name), tuple(zip(map(float, xs), map(float, ys), strict=True)), ceiling, last,
                 path.name, last.model)


def load_curve(spec: str) -> Curve:
    """The curve ``spec`` names: ``atlas:N``, a sweep's ``.json`` or a recording's ``.jsonl``."""
    if spec.startswith("atlas:"):
        return _from_atlas(spec)
    path = Path(spec)
    if not path.is_file():
        raise CompareError(f"{spec}: no such file (give a sweep's .json, a recording's .jsonl, or atlas:N)")
    if path.suffix == ".jsonl":
        return _from_recording(path)
    try:
        result = read_text(path.read_bytes())
    except OSError as exc:
        raise CompareError(f"{spec}: {exc.strerror or exc}") from None
    except SweepFileError as exc:
        raise CompareError(f"{spec}: {exc}") from None
    return replace(curve_of_sweep(result),
                   source=f"sweep of {_when(result.started_unix_s)}" if result.started_unix_s else path.name)
