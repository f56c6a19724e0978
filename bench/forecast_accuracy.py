"""How well the decode forecast predicts deeper context: published depth sweeps, fitted on their first half.

For each sweep in ``bench/data/depth_sweeps.json`` (sources, hardware, model shapes and points are cited there), the
forecast kvmon draws (``kvmon.physics.decode_model``, or the context-linear line where the shape or the bandwidth is
unknown) is fitted on the first half of the depths (⌈n/2⌉ of them) and asked for the rest; the error is
(forecast − measured) ÷ measured in tok/s. The sweeps are in two sets: ``in_sample`` (the attention prior of
``kvmon.physics.attention_prior`` is estimated from them, see ``bench/attention_prior.py``) and ``held_out`` (never
used for it). In-sample sweeps are also scored with the prior estimated without them (``loo``, leave one out).

Printed per sweep: the fit's form, the error at the deepest predicted depth, the worst and mean error, whether the
80% band held each predicted point (held/predicted), the band's half-width at twice the deepest fitted depth (as a
share of the forecast), the leave-one-out error at the deepest depth, and the context-linear line's worst error on
the same split. Where the kernels change with depth (Metal), depths past the switch are not forecast unless the
fitted half reached past it, and say so. Then, per set: how many shaped sweeps are within the goal of 10% at their
deepest predicted depth, the band's coverage over the predicted points (goal 75–90%) and its median half-width at
twice the deepest fitted depth (goal ≤ 10%).

Depth is the KV cache before the timed tokens in every tool here; the bench uses the mean depth while timing (plus
half the generated tokens), since the time per token grows with depth as they are generated.

    python bench/forecast_accuracy.py [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

from kvmon.physics.attention_prior import AttentionPrior, kernel_switch
from kvmon.physics.ceiling import DeviceShare
from kvmon.physics.decode_model import ReadProfile, fit_bytes
from kvmon.physics.forecast import fit_decode
from kvmon.physics.gpus import lookup_gpu
from kvmon.physics.presets import preset
from kvmon.physics.shape import ModelShape
from kvmon.physics.weights import weight_bytes_read_per_token

DATA = Path(__file__).resolve().parent / "data" / "depth_sweeps.json"
GOAL = 0.10
COVERAGE_GOAL = (0.75, 0.90)
SETS = ("in_sample", "held_out")


def _shape(model: dict[str, Any]) -> ModelShape:
    if "preset" in model:
        return preset(model["preset"]).shape()
    return ModelShape.from_gguf(model["gguf"])


def _bandwidth(hw: dict[str, Any]) -> float | None:
    if hw.get("gpu_table"):
        spec = lookup_gpu(hw["gpu_table"])
        if spec is None:
            raise SystemExit(f"GPU {hw['gpu_table']!r} is not in kvmon's GPU table")
        return spec.bandwidth_bytes_per_s
    return hw.get("bandwidth_bytes_per_s")


def kernel_switch_of(sweep: dict[str, Any]) -> int | None:
    """The depth past which the sweep's device changes attention kernels (as the dashboard decides it), or None."""
    spec = lookup_gpu(sweep["hardware"].get("gpu_table"))
    found = kernel_switch([spec.vendor if spec else None])
    return found.tokens if found else None


def points_of(sweep: dict[str, Any]) -> list[tuple[float, float]]:
    """(mean depth while timing, tok/s) of every point of the sweep."""
    tg = sweep["measurement"].get("tg_tokens") or 0
    return [(float(d) + tg / 2.0, float(v)) for d, v in sweep["points"]]


def profile_of(sweep: dict[str, Any]) -> ReadProfile | None:
    """The sweep's bytes read per step on its devices, as the dashboard would compute them."""
    if sweep["fit"] != "bytes":
        return None
    shape = _shape(sweep["model"])
    weights = float(sweep["weight_bytes"])
    embedding = None
    if not sweep["tied_embeddings"] and shape.vocab_size:
        # the token-embedding table is read one row per token: its share of the file, at the file's bits per weight
        embedding = shape.vocab_size * shape.n_embd * weights / float(sweep["n_params"])
    read = weight_bytes_read_per_token(shape, weights, embedding_bytes=embedding).bytes
    bw = _bandwidth(sweep["hardware"])
    if bw is None:
        return None
    count = int(sweep["hardware"].get("count", 1))  # a layer split: each device holds its share of both
    where = "host" if sweep.get("compute") == "cpu" else "gpu"
    devices = [DeviceShare(f"device {i}", bw, read / count, 1.0 / count, where) for i in range(count)]
    return ReadProfile.of(devices, shape, sweep["cache_type_k"], sweep["cache_type_v"])


def _split(points: list[tuple[float, float]]) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    half = math.ceil(len(points) / 2)
    return points[:half], points[half:]


def _bytes_scores(profile: ReadProfile, sweep: dict[str, Any], prior: AttentionPrior | None) -> dict[str, Any]:
    train, test = _split(points_of(sweep))
    _train_labels, test_labels = _split([(float(d), float(v)) for d, v in sweep["points"]])
    fit = fit_bytes(train, profile, kernel_switch_tokens=kernel_switch_of(sweep), prior=prior)
    assert fit is not None
    errors: list[float] = []
    held = 0
    skipped = 0
    for (n, v), (label, _v) in zip(test, test_labels, strict=True):
        if fit.valid_to_tokens is not None and label > fit.valid_to_tokens:  # "beyond 8K": past the labelled depth
            skipped += 1
            continue
        p = fit.predict(n)
        ceiling = 1.0 / float(profile.roofline_s(n))
        if p.tok_s > ceiling * (1 + 1e-9) or p.high_tok_s > ceiling * (1 + 1e-9):
            raise SystemExit(f"{sweep['id']}: forecast above the ceiling at {n:.0f} tokens")
        errors.append(p.tok_s / v - 1.0)
        held += int(p.low_tok_s <= v <= p.high_tok_s)
    at = 2.0 * max(n for n, _v in train)
    half = None
    if fit.valid_to_tokens is None or at <= fit.valid_to_tokens:
        p2 = fit.predict(at)
        half = (p2.high_tok_s - p2.low_tok_s) / 2.0 / p2.tok_s
    return {"fit": fit, "errors": errors, "held": held, "skipped": skipped, "half_width_2x": half}


def evaluate(sweep: dict[str, Any], loo: bool = True) -> dict[str, Any]:
    """Fit the first half of the sweep's depths, predict the rest; the errors, the band, what the fit was."""
    points = points_of(sweep)
    train, test = _split(points)
    line = fit_decode(train)
    line_errors = [line.predict(n).tok_s / v - 1.0 for n, v in test] if line else []
    profile = profile_of(sweep)
    row: dict[str, Any] = {"id": sweep["id"], "set": sweep.get("set", "in_sample"), "kind": "+".join(sweep["kind"]),
                           "n_fit": len(train), "n_predicted": len(test), "flags": list(sweep.get("flags", []))}
    above_ceiling = False
    row["loo_deepest_error"] = None
    if profile is None:
        errors = line_errors
        row.update(form="context_linear", why=sweep["fit"].removeprefix("context_linear: "), held=None,
                   half_width_2x=None, skipped=0, attention_class=None)
    else:
        got = _bytes_scores(profile, sweep, None)
        fit, errors = got["fit"], got["errors"]
        above_ceiling = any(v * float(profile.roofline_s(n)) > 1.0 for n, v in points)
        row.update(form=fit.form, attention_class=profile.attention_class, efficiency=round(fit.efficiency, 3),
                   overhead_ms=round(fit.overhead_s * 1e3, 3), b=round(fit.b, 3), held=got["held"],
                   half_width_2x=got["half_width_2x"], skipped=got["skipped"],
                   valid_to_tokens=fit.valid_to_tokens)
        if loo and row["set"] == "in_sample" and got["skipped"] == 0:
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            from attention_prior import priors  # bench/attention_prior.py (it imports this module)

            table = priors(_all_sweeps(), exclude=sweep["id"])
            own = table.get(profile.attention_class)
            if own is not None:
                e = _bytes_scores(profile, sweep, own)["errors"]
                row["loo_deepest_error"] = e[-1] if e else None
    row["deepest_error"] = errors[-1] if errors else None
    row["worst_error"] = max(errors, key=abs) if errors else None
    row["mean_abs_error"] = sum(abs(e) for e in errors) / len(errors) if errors else None
    row["n_scored"] = len(errors)
    row["line_worst_error"] = max(line_errors, key=abs) if line_errors else None
    row["measured_above_ceiling"] = above_ceiling
    return row


_SWEEPS: list[dict[str, Any]] | None = None


def _all_sweeps() -> list[dict[str, Any]]:
    global _SWEEPS
    if _SWEEPS is None:
        _SWEEPS = json.loads(DATA.read_text(encoding="utf-8"))["sweeps"]
    return _SWEEPS


def _pct(x: float | None) -> str:
    return "     —" if x is None else f"{x:+6.1%}"


def summary(rows: list[dict[str, Any]], which: str) -> dict[str, Any]:
    """Per set: shaped sweeps within the goal at their deepest depth, the band's coverage and median half-width."""
    mine = [r for r in rows if r["set"] == which]
    shaped = [r for r in mine if r["form"] != "context_linear" and r["deepest_error"] is not None]
    held = sum(r["held"] for r in shaped)
    scored = sum(r["n_scored"] for r in shaped)
    halves = [r["half_width_2x"] for r in shaped if r["half_width_2x"] is not None]
    per_sweep = [r["held"] / r["n_scored"] for r in shaped if r["n_scored"]]
    return {
        "set": which, "sweeps": len(mine), "shaped": len(shaped),
        "within_goal": sum(1 for r in shaped if abs(r["deepest_error"]) <= GOAL),
        "worst_within": sum(1 for r in shaped if abs(r["worst_error"]) <= GOAL),
        "coverage": held / scored if scored else None, "points": scored,
        "coverage_per_sweep": statistics.mean(per_sweep) if per_sweep else None,
        "median_half_width_2x": statistics.median(halves) if halves else None,
        "not_forecast_points": sum(r["skipped"] for r in mine),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args(argv)
    rows = [evaluate(s) for s in _all_sweeps()]
    sums = [summary(rows, s) for s in SETS]
    if args.json:
        print(json.dumps({"rows": rows, "summary": sums}, indent=1, default=str))
        return 0
    print(f"forecast accuracy: fit on the first half of each sweep's depths, predict the rest (goal ±{GOAL:.0%} at the "
          f"deepest; 80% band: coverage {COVERAGE_GOAL[0]:.0%}–{COVERAGE_GOAL[1]:.0%}, half-width ≤ 10% at 2× the "
          "deepest fitted depth)\n")
    print(f"{'sweep':56} {'form':19} {'fit/pred':>8} {'deepest':>7} {'worst':>7} {'mean':>6} {'band':>6} "
          f"{'half2x':>6} {'loo':>7} {'line':>7}  notes")
    for which in SETS:
        print(f"-- {which.replace('_', '-')} --")
        for r in (r for r in rows if r["set"] == which):
            notes = list(r["flags"])
            if r["measured_above_ceiling"]:
                notes.append("measured above the ceiling")
            if r["form"] == "context_linear":
                notes.append(r["why"])
            if r["skipped"]:
                notes.append(f"kernel-dependent beyond {r['valid_to_tokens'] / 1024:.0f}K: {r['skipped']} deeper "
                             "point(s) not forecast")
            mean = "     —" if r["mean_abs_error"] is None else f"{r['mean_abs_error']:6.1%}"
            band = "     —" if r["held"] is None else f"{r['held']:>2}/{r['n_scored']:<3}"
            half = "     —" if r["half_width_2x"] is None else f"{r['half_width_2x']:6.1%}"
            print(f"{r['id'][:56]:56} {r['form']:19} {r['n_fit']:>3}/{r['n_predicted']:<4} {_pct(r['deepest_error'])} "
                  f"{_pct(r['worst_error'])} {mean} {band} {half} {_pct(r['loo_deepest_error'])} "
                  f"{_pct(r['line_worst_error'])}  {'; '.join(notes)}")
    print()
    for s in sums:
        cov = "—" if s["coverage"] is None else f"{s['coverage']:.0%} of {s['points']} points"
        per = "—" if s["coverage_per_sweep"] is None else f"{s['coverage_per_sweep']:.0%}"
        half = "—" if s["median_half_width_2x"] is None else f"{s['median_half_width_2x']:.1%}"
        print(f"{s['set'].replace('_', '-'):10}: within ±{GOAL:.0%} at the deepest depth: {s['within_goal']} of "
              f"{s['shaped']} shaped sweeps (worst depth within: {s['worst_within']}); band coverage {cov} "
              f"(mean per sweep {per}); median half-width at 2× the deepest fitted depth {half}"
              + (f"; {s['not_forecast_points']} point(s) past a kernel switch not forecast"
                 if s["not_forecast_points"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
