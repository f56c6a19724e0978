"""The attention prior: its constants are what the in-sample published sweeps give, never the held-out ones."""

from __future__ import annotations

import importlib.util
import math
from typing import Any

import pytest
from repo_paths import BENCH

from kvmon.physics import attention_prior as ap

BENCH = BENCH


def _prior_bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_attention_prior", BENCH / "attention_prior.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_constants_are_what_the_in_sample_sweeps_give(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))  # bench/attention_prior.py imports its neighbour forecast_accuracy
    bench = _prior_bench()
    import forecast_accuracy  # on the path now: the one bench/attention_prior.py reads the sweeps with

    sweeps = forecast_accuracy._all_sweeps()
    table = bench.priors(sweeps)
    assert set(table) == set(ap.PRIORS)
    for c, p in table.items():
        shipped = ap.PRIORS[c]
        assert shipped.log_b_mean == pytest.approx(p.log_b_mean, abs=1e-4), c
        assert shipped.log_b_sd == pytest.approx(p.log_b_sd, abs=1e-4), c
        assert shipped.sweeps == p.sweeps, c
    assert ap.POOLED_LOG_SD == pytest.approx(bench.pooled_sd(sweeps), abs=1e-4)
    pairs = [(r, d) for _s, r, d in bench.drift_pairs(sweeps)]
    assert ap.DRIFT_PER_DOUBLING == pytest.approx(ap.drift_per_doubling(pairs), abs=1e-4)
    assert ap.FIT_SPREAD_FLOOR == pytest.approx(ap.spread_floor([v for _s, v in bench.spreads(sweeps)]), abs=1e-4)
    # estimated from the in-sample set only: no held-out sweep, no sweep whose kernels change with depth
    by_id = {s["id"]: s for s in sweeps}
    used = {sid for p in table.values() for sid in p.sweeps}
    assert used and all(by_id[sid]["set"] == "in_sample" for sid in used)
    assert all(forecast_accuracy.kernel_switch_of(by_id[sid]) is None for sid in used)
    held = {s["id"] for s in sweeps if s["set"] == "held_out"}
    assert held and not held & used


def test_estimate_shrinks_a_small_class_toward_the_pooled_spread() -> None:
    close = [("a", 1.30), ("b", 1.35), ("c", 1.40)]  # three sweeps that agree
    wide = [("d", 2.0), ("e", 8.0), ("f", 30.0)]
    table = ap.estimate({"gqa": close, "mla": wide})
    own = math.sqrt(sum((math.log(b) - table["gqa"].log_b_mean) ** 2 for _s, b in close) / 2)
    assert table["gqa"].log_b_sd > 2 * own  # three agreeing sweeps do not claim a narrow prior
    assert table["gqa"].log_b_mean == pytest.approx(sum(math.log(b) for _s, b in close) / 3)
    assert table["mla"].log_b_sd > table["gqa"].log_b_sd
    assert table["mha"].log_b_mean == table["gqa"].log_b_mean  # the stand-in borrows gqa's centre
    single = ap.estimate({"cpu": [("g", 2.8)]})
    assert single["cpu"].log_b_sd >= ap.MIN_LOG_SD


def test_every_class_has_a_prior_and_an_unknown_one_gets_the_widest() -> None:
    for c in ap.CLASSES:
        assert ap.prior_for(c) == ap.PRIORS[c]
        assert ap.PRIORS[c].log_b_sd >= ap.MIN_LOG_SD
    odd = ap.prior_for("something_new")
    assert odd.log_b_sd == max(p.log_b_sd for p in ap.PRIORS.values())
    # what the published sweeps say, in words: hybrids' KV costs more than its bytes; MLA the most; GQA the least
    assert ap.PRIORS["gqa"].b_median < ap.PRIORS["hybrid_recurrent"].b_median < ap.PRIORS["mla"].b_median


def test_drift_and_spread_estimators() -> None:
    assert ap.drift_per_doubling([(0.2, 2.0), (-0.2, 2.0)]) == pytest.approx(0.1)
    assert ap.drift_per_doubling([]) == 0.0
    assert ap.spread_floor([0.01, 0.03]) == pytest.approx(0.02)
    assert 0 < ap.DRIFT_PER_DOUBLING < 0.5 and 0.005 < ap.FIT_SPREAD_FLOOR < 0.05


def test_the_kernel_switch_is_said_in_words() -> None:
    k = ap.kernel_switch(["nvidia", "apple"])
    assert k is not None and k.backend == "Metal" and k.tokens == 8192
    assert k.note.startswith("kernel-dependent beyond 8K: Metal's attention kernels change with depth")
    assert ap.kernel_switch([]) is None and ap.kernel_switch(["amd", "intel", None]) is None
