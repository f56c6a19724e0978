"""The decode forecast: fitted on the first three points of each measured table in the seeds.

Context labels: in 000_… the depths are llama-bench's powers of two written loosely ("8K" = 8,192, "32K" =
32,768, "64K" = 65,536, but "131K" = 131,072 and "262K" = 262,144, i.e. 128 Ki and 256 Ki — the text itself
says "At 256K context"), so K = 1024 throughout. In 003_… "2K … 32K" are read as 2,048 … 32,768; any common
unit gives the same relative errors there, because the fit is linear in context.
"""

from __future__ import annotations

import math

import pytest

from kvmon.physics.forecast import DecodeFit, fit_decode, fit_decode_checked

K = 1024
TABLES: dict[str, list[tuple[int, float]]] = {
    # 000_…: dual RTX 3090, 27B hybrid Q4_K_M, q8_0 KV, flash attention
    "dual-3090 27B": [(0, 58.45), (8 * K, 55.69), (32 * K, 49.66), (64 * K, 42.83), (128 * K, 33.45),
                      (256 * K, 22.68)],
    # 003_…: RTX 4090, "Llama 3.1 7B" Q4
    "4090 7B Q4": [(2 * K, 95), (4 * K, 87), (8 * K, 76), (16 * K, 61), (32 * K, 47)],
    # 003_…: M2 Max, 13B Q8
    "M2 Max 13B Q8": [(2 * K, 46), (4 * K, 44), (8 * K, 39), (16 * K, 31)],
}
TOLERANCE = 0.12


@pytest.mark.parametrize("name", list(TABLES))
def test_seed_tables_predicted_within_12_percent(name: str) -> None:
    table = TABLES[name]
    fit = fit_decode(table[:3])
    assert fit is not None
    lines = []
    worst = 0.0
    for context, measured in table[3:]:
        p = fit.predict(context)
        err = (p.tok_s - measured) / measured
        worst = max(worst, abs(err))
        lines.append(f"{name}: {context:>7} tokens measured {measured:6.2f} predicted {p.tok_s:6.2f} tok/s "
                     f"error {err:+.1%} (80% interval {p.low_tok_s:.1f}–{p.high_tok_s:.1f})")
        # the measured value lies inside the interval
        assert p.low_tok_s <= measured <= p.high_tok_s, "\n".join(lines)
    print("\n" + "\n".join(lines))
    assert worst <= TOLERANCE, "\n".join(lines)


def test_seed_table_errors_are_the_expected_ones() -> None:
    # Worked by hand: 4090 → 32K is the hardest point (time per token rises less than linearly from 16K on):
    # fit 0.009652 s + 4.28e-7 s/token → 42.2 tok/s vs 47 measured, −10.2%.
    fit = fit_decode(TABLES["4090 7B Q4"][:3])
    assert fit is not None
    assert fit.predict(32 * K).tok_s == pytest.approx(42.2, abs=0.1)
    fit3090 = fit_decode(TABLES["dual-3090 27B"][:3])
    assert fit3090 is not None
    assert fit3090.a_s == pytest.approx(1 / 58.45, rel=1e-3)


def test_interval_widens_with_distance_and_fewer_points() -> None:
    table = TABLES["dual-3090 27B"]
    fit3 = fit_decode(table[:3])
    fit5 = fit_decode(table[:5])
    assert fit3 is not None and fit5 is not None

    def width(fit: DecodeFit, context: int) -> float:
        p = fit.predict(context)
        return p.high_tok_s - p.low_tok_s

    assert width(fit3, 64 * K) < width(fit3, 128 * K) < width(fit3, 256 * K)
    # relative width at 256K: three points extrapolated 8× are less certain than five points 2×
    rel3 = width(fit3, 256 * K) / fit3.predict(256 * K).tok_s
    rel5 = width(fit5, 256 * K) / fit5.predict(256 * K).tok_s
    assert rel5 < rel3
    p = fit3.predict(0)
    assert p.low_tok_s < p.tok_s < p.high_tok_s


def test_robust_to_an_outlier() -> None:
    # a slope of 1e-7 s/token from 20 ms; one stalled sample (a 10× slow token) barely moves the fit
    clean = [(c, 1 / (0.02 + 1e-7 * c)) for c in range(0, 20_000, 1000)]
    noisy = [*clean[:7], (7000, 5.0), *clean[8:]]
    fit = fit_decode(noisy)
    assert fit is not None
    assert fit.b_s_per_token == pytest.approx(1e-7, rel=0.05)
    assert fit.predict(40_000).tok_s == pytest.approx(1 / (0.02 + 0.004), rel=0.02)


@pytest.mark.parametrize(
    "points",
    [[], [(100, 50.0)], [(100, 50.0), (100, 49.0)], [(100, 0.0), (200, -5.0)], [(math.nan, 5.0), (1, math.inf)],
     [("x", 1), (None, 2)], [(-5, 10.0), (10, 10.0)]],  # type: ignore[list-item]
)
def test_too_few_or_bad_points_give_none(points: list[tuple[float, float]]) -> None:
    assert fit_decode(points) is None


def test_speed_rising_with_context_is_rejected_with_the_reason() -> None:
    # a negative slope would reach zero time per token at some depth: no line, and why (never clamped flat)
    fit, why = fit_decode_checked([(0, 40.0), (1000, 41.0), (2000, 42.0)])
    assert fit is None and why is not None and "rises with depth" in why
    assert fit_decode([(0, 40.0), (1000, 41.0), (2000, 42.0)]) is None
    _fit, why = fit_decode_checked([(100, 50.0)])
    assert why == "fewer than two measured context depths"


def test_many_points_are_binned() -> None:
    pts = [(c, 1 / (0.01 + 2e-7 * c)) for c in range(0, 50_000, 10)]  # 5000 points
    fit = fit_decode(pts)
    assert fit is not None and fit.n_points == 300
    assert fit.b_s_per_token == pytest.approx(2e-7, rel=1e-3)
