"""The attention prior, estimated from the in-sample published sweeps: prints each sweep's slope and the priors.

Every in-sample sweep of ``bench/data/depth_sweeps.json`` with a model shape and a bandwidth (``"fit": "bytes"``),
except those on devices whose attention kernels change with depth (Metal: their slope is not one number), is fitted
on all its points with ``kvmon.physics.decode_model.free_slope``: b of t = a + b·x(n), a and b free, relative least
squares. The sweeps are grouped by ``kvmon.physics.attention_prior.attention_class`` and
``attention_prior.estimate`` turns each group's log b into the class prior. The held-out sweeps are not read.
The same sweeps give the slope's drift with depth (first half against second half) and the spread of points about
their own line. ``--python`` prints all of it as the literals ``kvmon/physics/attention_prior.py`` holds (its test
checks they agree).

    python bench/attention_prior.py [--python]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from forecast_accuracy import DATA, kernel_switch_of, points_of, profile_of

from kvmon.physics import attention_prior
from kvmon.physics.decode_model import free_slope


def in_sample(sweeps: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The sweeps the prior may be estimated from."""
    return [s for s in sweeps if s.get("set", "in_sample") == "in_sample"]


def slopes(sweeps: Iterable[dict[str, Any]], exclude: str | None = None) -> dict[str, list[tuple[str, float]]]:
    """Per attention class, (sweep id, fitted b) of the in-sample sweeps that count (``exclude``: one left out)."""
    out: dict[str, list[tuple[str, float]]] = {}
    for s in in_sample(sweeps):
        if s["id"] == exclude:
            continue
        profile = profile_of(s)
        if profile is None or kernel_switch_of(s) is not None:
            continue
        b = free_slope(points_of(s), profile)
        if b is None:
            continue
        out.setdefault(profile.attention_class, []).append((s["id"], b))
    return out


def priors(sweeps: Iterable[dict[str, Any]], exclude: str | None = None) -> dict[str, attention_prior.AttentionPrior]:
    """The class priors from the in-sample sweeps (one left out, for a leave-one-out score)."""
    return attention_prior.estimate(slopes(sweeps, exclude))


def _counted(sweeps: Iterable[dict[str, Any]]) -> list[tuple[dict[str, Any], Any]]:
    return [(s, p) for s in in_sample(sweeps) if (p := profile_of(s)) is not None and kernel_switch_of(s) is None]


def drift_pairs(sweeps: Iterable[dict[str, Any]]) -> list[tuple[str, float, float]]:
    """(sweep id, log(b of the second half ÷ b of the first), doublings between the halves' mean KV reads)."""
    out = []
    for s, profile in _counted(sweeps):
        pts = points_of(s)
        half = math.ceil(len(pts) / 2)
        first, second = pts[:half], pts[half:]
        if len(first) < 2 or len(second) < 2:
            continue
        b1, b2 = free_slope(first, profile), free_slope(second, profile)
        x1 = sum(float(profile.kv_s(n)) for n, _v in first) / len(first)
        x2 = sum(float(profile.kv_s(n)) for n, _v in second) / len(second)
        if b1 and b2 and b1 > 0 and b2 > 0 and x1 > 0 and x2 > x1:
            out.append((s["id"], math.log(b2 / b1), math.log2(x2 / x1)))
    return out


def spreads(sweeps: Iterable[dict[str, Any]]) -> list[tuple[str, float]]:
    """(sweep id, relative spread of its points about its own free line)."""
    out = []
    for s, profile in _counted(sweeps):
        pts = points_of(s)
        b = free_slope(pts, profile)
        if b is None:
            continue
        x = [float(profile.kv_s(n)) for n, _v in pts]
        t = [1.0 / v for _n, v in pts]
        # a of the same free line: the relative least squares of t − b·x on t (closed form)
        num = sum((ti - b * xi) / ti for ti, xi in zip(t, x, strict=True))
        den = sum(1.0 / ti for ti in t)
        a = num / den
        res = [1.0 - (a + b * xi) / ti for ti, xi in zip(t, x, strict=True)]
        out.append((s["id"], math.sqrt(sum(r * r for r in res) / max(1, len(res) - 2))))
    return out


def pooled_sd(sweeps: Iterable[dict[str, Any]]) -> float:
    """The spread of every in-sample log b about its class mean (what a class of few sweeps falls back on)."""
    groups = slopes(sweeps)
    dev = []
    for rows in groups.values():
        logs = [math.log(b) for _s, b in rows]
        m = sum(logs) / len(logs)
        dev.extend(v - m for v in logs)
    return math.sqrt(sum(v * v for v in dev) / max(1, len(dev) - len(groups)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", action="store_true", help="print the priors as the module's literal")
    args = ap.parse_args(argv)
    sweeps = json.loads(DATA.read_text(encoding="utf-8"))["sweeps"]
    groups = slopes(sweeps)
    table = attention_prior.estimate(groups)
    if args.python:
        print("PRIORS: dict[str, AttentionPrior] = {p.attention_class: p for p in (")
        for c in attention_prior.CLASSES:
            p = table.get(c)
            if p is not None:
                print(f'    AttentionPrior("{c}", {p.log_b_mean:.4f}, {p.log_b_sd:.4f}, (')
                for sid in p.sweeps:
                    print(f'        "{sid}",')
                print("    )),")
        print(")}")
        print(f"POOLED_LOG_SD = {pooled_sd(sweeps):.4f}")
        drift = attention_prior.drift_per_doubling([(r, d) for _s, r, d in drift_pairs(sweeps)])
        print(f"DRIFT_PER_DOUBLING = {drift:.4f}")
        print(f"FIT_SPREAD_FLOOR = {attention_prior.spread_floor([v for _s, v in spreads(sweeps)]):.4f}")
        return 0
    print("attention prior: b of t = a + b·x(n) fitted on all points of each in-sample sweep\n")
    for c in attention_prior.CLASSES:
        for sid, b in groups.get(c, []):
            print(f"  {c:17} {sid:60} b = {b:6.2f}")
    print()
    print(f"  {'class':17} {'sweeps':>6} {'median b':>9} {'log sd':>7}  80% range of b")
    for c in attention_prior.CLASSES:
        p = table.get(c)
        if p is None:
            print(f"  {c:17} {'0':>6}  (none: the widest prior about gqa's centre)")
            continue
        lo, hi = math.exp(p.log_b_mean - 1.2816 * p.log_b_sd), math.exp(p.log_b_mean + 1.2816 * p.log_b_sd)
        own = len(groups.get(c, []))
        print(f"  {c:17} {own:>6} {p.b_median:9.2f} {p.log_b_sd:7.3f}  {lo:.2f} – {hi:.2f}")
    print(f"\n  pooled log sd about the class means: {pooled_sd(sweeps):.3f}")
    pairs = drift_pairs(sweeps)
    print("\nslope drift with depth: log(b second half ÷ b first half), per doubling of the mean KV read")
    for sid, r, d in pairs:
        print(f"  {sid:60} {r:+6.2f} over {d:4.2f} doublings")
    print(f"  DRIFT_PER_DOUBLING = {attention_prior.drift_per_doubling([(r, d) for _s, r, d in pairs]):.4f}")
    sp = spreads(sweeps)
    print("\nspread of each sweep's points about its own free line")
    for sid, v in sp:
        print(f"  {sid:60} {v:6.2%}")
    print(f"  FIT_SPREAD_FLOOR (their mean) = {attention_prior.spread_floor([v for _s, v in sp]):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
