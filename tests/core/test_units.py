"""Human formatting: every quantity reads the same everywhere, unknown is a dash."""

from __future__ import annotations

import math

import pytest

from kvmon.core.units import (
    DASH,
    GIB,
    MIB,
    fmt_bandwidth,
    fmt_bytes,
    fmt_count,
    fmt_duration,
    fmt_energy,
    fmt_joules_per_token,
    fmt_percent,
    fmt_tok_s,
    fmt_tok_s_approx,
    fmt_tokens,
    fmt_watts,
)


@pytest.mark.parametrize(
    ("value", "text"),
    [(38.24, "38.2 tok/s"), (4.567, "4.57 tok/s"), (204.88, "205 tok/s"), (1234.4, "1,234 tok/s"), (0.0, "0.00 tok/s"),
     (9.996, "10.0 tok/s"), (9.994, "9.99 tok/s"), (99.96, "100 tok/s"), (99.94, "99.9 tok/s"), (-9.996, "-10.0 tok/s"),
     (999.6, "1,000 tok/s")],
)
def test_tok_s(value: float, text: str) -> None:
    assert fmt_tok_s(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [(6.55 * GIB, "6.55 GiB"), (512 * MIB, "512 MiB"), (17, "17 B"), (4096, "4.00 KiB"), (24 * GIB, "24.0 GiB"),
     (1.5 * 1024 * GIB, "1.50 TiB")],
)
def test_bytes(value: float, text: str) -> None:
    assert fmt_bytes(value) == text


def test_tokens() -> None:
    assert fmt_tokens(41_210) == "41.2K tokens"
    assert fmt_tokens(850) == "850 tokens"
    assert fmt_tokens(131_072, exact=True) == "131,072"
    assert fmt_tokens(1_048_576) == "1.05M tokens"
    assert fmt_count(2300) == "2,300"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(45, "45 s"), (4.25, "4.2 s"), (61, "≈ 1 min"), (89, "≈ 1 min"), (7500, "≈ 2 h 5 min"), (7200, "≈ 2 h"),
     (3 * 86400, "≈ 3.0 d"), (-5, "0.0 s")],
)
def test_duration(seconds: float, text: str) -> None:
    assert fmt_duration(seconds) == text


def test_duration_exact() -> None:
    assert fmt_duration(600, approx=False) == "10 min"


def test_bandwidth_and_percent() -> None:
    assert fmt_bandwidth(936e9) == "936 GB/s"
    assert fmt_bandwidth(31.5e9) == "31.5 GB/s"
    assert fmt_bandwidth(850e6) == "850 MB/s"
    assert fmt_bandwidth(3.35e12) == "3.35 TB/s"
    assert fmt_percent(0.634) == "63%"
    assert fmt_percent(0.634, digits=1) == "63.4%"


@pytest.mark.parametrize(("tok_s", "text"), [(9165, "~9,200 tok/s"), (9154, "~9,200 tok/s"), (42.7, "~43 tok/s"),
                                              (5.33, "~5.3 tok/s"), (0.52, "~0.52 tok/s"), (99.6, "~100 tok/s"),
                                              (0, "~0 tok/s")])
def test_approximate_speed_has_two_figures(tok_s: float, text: str) -> None:
    assert fmt_tok_s_approx(tok_s) == text


@pytest.mark.parametrize("bad", [None, math.nan, math.inf, -math.inf])
def test_unknown_is_a_dash(bad: float | None) -> None:
    for f in (fmt_tok_s, fmt_tok_s_approx, fmt_bytes, fmt_tokens, fmt_duration, fmt_bandwidth, fmt_percent, fmt_count,
              fmt_watts, fmt_energy, fmt_joules_per_token):
        assert f(bad) == DASH
