"""How well the decode forecast predicts deeper context: published depth sweeps, fitted on their first half.

For each sweep in ``bench/data/depth_sweeps.json`` (sources, hardware, model shapes and points are cited there), the
forecast kvmon draws (``kvmon.physics.decode_model``, or the context-linear line where the shape or the bandwidth is
unknown) is fitted on the first half of the depths (⌈n/2⌉ of them) and asked for the rest; the error is
(forecast − measured) ÷ measured in tok/s. Printed per sweep: the fit's form, the worst and the mean error, the
context-linear line's worst error on the same split for comparison, and whether the measured speed ever exceeded the
ceiling (then a ceiling input in the data, or the sweep, is wrong). Then the worst sweep and how many are within the
goal of 10%.

Depth is the KV cache before the timed tokens in every tool here; the bench uses the mean depth while timing (plus
half the generated tokens), since the time per token grows with depth as they are generated.

    python bench/forecast_accuracy.py [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from kvmon.physics.ceiling import DeviceShare
from kvmon.physics.decode_model import ReadProfile, fit_bytes
from kvmon.physics.forecast import fit_decode
from kvmon.physics.gpus import lookup_gpu
from kvmon.physics.presets import preset
from kvmon.physics.shape import ModelShape
from kvmon.physics.weights import weight_bytes_read_per_token

DATA = Path(__file__).resolve().parent / "data" / "depth_sweeps.json"
GOAL = 0.10


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
    devices = [DeviceShare(f"device {i}", bw, read / count, 1.0 / count) for i in range(count)]
    return ReadProfile.of(devices, shape, sweep["cache_type_k"], sweep["cache_type_v"])


def evaluate(sweep: dict[str, Any]) -> dict[str, Any]:
    """Fit the first half of the sweep's depths, predict the rest; the errors and what the fit was."""
    tg = sweep["measurement"].get("tg_tokens") or 0
    points = [(float(d) + tg / 2.0, float(v)) for d, v in sweep["points"]]
    half = math.ceil(len(points) / 2)
    train, test = points[:half], points[half:]
    line = fit_decode(train)
    line_errors = [line.predict(n).tok_s / v - 1.0 for n, v in test] if line else []
    profile = profile_of(sweep)
    row: dict[str, Any] = {"id": sweep["id"], "kind": "+".join(sweep["kind"]), "n_fit": len(train),
                           "n_predicted": len(test), "flags": sweep.get("flags", [])}
    above_ceiling = False
    if profile is None:
        errors = line_errors
        row["form"] = "context_linear"
        row["why"] = sweep["fit"].removeprefix("context_linear: ")
    else:
        fit = fit_bytes(train, profile)
        assert fit is not None
        errors = []
        for n, v in test:
            p = fit.predict(n)
            ceiling = 1.0 / float(profile.roofline_s(n))
            if p.tok_s > ceiling * (1 + 1e-9) or p.high_tok_s > ceiling * (1 + 1e-9):
                raise SystemExit(f"{sweep['id']}: forecast above the ceiling at {n:.0f} tokens")
            errors.append(p.tok_s / v - 1.0)
        above_ceiling = any(v * float(profile.roofline_s(n)) > 1.0 for n, v in points)
        row.update(form=fit.form, efficiency=round(fit.efficiency, 3), overhead_ms=round(fit.overhead_s * 1e3, 3),
                   attention_factor=round(fit.attention_factor, 3))
    row["worst_error"] = max(errors, key=abs) if errors else None
    row["mean_abs_error"] = sum(abs(e) for e in errors) / len(errors) if errors else None
    row["line_worst_error"] = max(line_errors, key=abs) if line_errors else None
    row["measured_above_ceiling"] = above_ceiling
    return row


def _pct(x: float | None) -> str:
    return "     —" if x is None else f"{x:+6.1%}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args(argv)
    sweeps = json.loads(DATA.read_text(encoding="utf-8"))["sweeps"]
    rows = [evaluate(s) for s in sweeps]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"forecast accuracy: fit on the first half of each sweep's depths, predict the rest (goal ±{GOAL:.0%})\n")
    print(f"{'sweep':58} {'form':20} {'fit/pred':>8} {'worst':>7} {'mean':>6} {'line':>7}  notes")
    for r in rows:
        notes = list(r["flags"])
        if r["measured_above_ceiling"]:
            notes.append("measured above the ceiling")
        if r["form"] == "context_linear":
            notes.append(r["why"])
        mean = "     —" if r["mean_abs_error"] is None else f"{r['mean_abs_error']:6.1%}"
        print(f"{r['id'][:58]:58} {r['form']:20} {r['n_fit']:>3}/{r['n_predicted']:<4} {_pct(r['worst_error'])} "
              f"{mean} {_pct(r['line_worst_error'])}  {'; '.join(notes)}")
    scored = [r for r in rows if r["worst_error"] is not None]
    worst = max(scored, key=lambda r: abs(r["worst_error"]))
    within = sum(1 for r in scored if abs(r["worst_error"]) <= GOAL)
    bytes_rows = [r for r in scored if r["form"] != "context_linear"]
    line_within = sum(1 for r in bytes_rows if r["line_worst_error"] is not None and abs(r["line_worst_error"]) <= GOAL)
    print(f"\nworst: {worst['id']} {worst['worst_error']:+.1%} ({worst['form']})")
    print(f"within ±{GOAL:.0%}: {within} of {len(scored)} sweeps "
          f"(bytes fit: {sum(1 for r in bytes_rows if abs(r['worst_error']) <= GOAL)} of {len(bytes_rows)}; "
          f"a straight line on the same sweeps: {line_within} of {len(bytes_rows)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
