"""Human formatting of kvmon's quantities: "38.2 tok/s", "6.55 GiB", "41.2K tokens", "≈ 1 min".

One place for number formatting so the dashboard, alerts, tray and ``once`` read the same. ``None``
(unknown) always formats as "—"; NaN and infinities too, since they never carry a real value here.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Concatenate, ParamSpec

DASH = "—"
KIB = 1024
MIB = 1024**2
GIB = 1024**3
TIB = 1024**4
P = ParamSpec("P")


def dash_when_unknown(fmt: Callable[Concatenate[float, P], str]) -> Callable[Concatenate[float | None, P], str]:
    """A formatter of a known number made to write "—" for an unknown one (None, NaN or an infinity)."""

    @functools.wraps(fmt)
    def formatted(value: float | None, /, *args: P.args, **kwargs: P.kwargs) -> str:
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            return DASH
        return fmt(value, *args, **kwargs)

    return formatted


def _sig3(value: float) -> str:
    """Three significant figures without trailing noise: 6.55, 38.2, 512, 1008 (9.996 is 10.0, not 10.00: the
    decimals follow the rounded value)."""
    a = abs(value)
    if a >= 99.95:
        return f"{value:.0f}"
    if a >= 9.995:
        return f"{value:.1f}"
    return f"{value:.2f}"


@dash_when_unknown
def fmt_tok_s(tok_s: float) -> str:
    """Decode/prefill speed: "38.2 tok/s", "1,234 tok/s", "0.52 tok/s"; "—" when unknown."""
    if abs(tok_s) >= 999.5:  # what rounds to 1,000 is written as 1,000
        return f"{tok_s:,.0f} tok/s"
    return f"{_sig3(tok_s)} tok/s"


@dash_when_unknown
def fmt_tok_s_approx(tok_s: float) -> str:
    """A speed to two significant figures, for a sentence that should not change with every token: "~9,200 tok/s",
    "~43 tok/s", "~5.3 tok/s"; "—" when unknown."""
    if tok_s == 0:
        return "~0 tok/s"
    digits = 1 - math.floor(math.log10(abs(tok_s)))
    rounded = round(tok_s, digits)
    return f"~{rounded:,.0f} tok/s" if digits <= 0 else f"~{rounded:.{digits}f} tok/s"


@dash_when_unknown
def fmt_watts(watts: float) -> str:
    """Power: "212 W", "38.5 W", "4.20 W"; "—" when unknown."""
    return f"{_sig3(watts)} W"


@dash_when_unknown
def fmt_energy(joules: float) -> str:
    """Energy as people meter it: "0.84 Wh", "12.5 Wh", "1.32 kWh"; "—" when unknown."""
    wh = joules / 3600.0
    return f"{_sig3(wh / 1000.0)} kWh" if abs(wh) >= 1000 else f"{_sig3(wh)} Wh"


@dash_when_unknown
def fmt_joules_per_token(j: float) -> str:
    """Energy per token: "0.42 J/token", "12.5 J/token"; "—" when unknown."""
    return f"{_sig3(j)} J/token"


def fmt_devices(names: Sequence[str]) -> str:
    """Device names as people count them: "2× NVIDIA GeForce RTX 3090, CPU package" (first seen first)."""
    counts = Counter(names)
    return ", ".join(f"{c}× {n}" if c > 1 else n for n, c in counts.items())


@dash_when_unknown
def fmt_bytes(n_bytes: float) -> str:
    """Memory sizes in binary units: "6.55 GiB", "512 MiB", "4.00 KiB", "17 B"."""
    a = abs(n_bytes)
    for unit, size in (("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if a >= size:
            return f"{_sig3(n_bytes / size)} {unit}"
    return f"{n_bytes:.0f} B"


@dash_when_unknown
def fmt_tokens(tokens: float, *, exact: bool = False) -> str:
    """Token counts: "41.2K tokens", "850 tokens", "1.05M tokens"; ``exact`` gives "131,072"."""
    if exact:
        return f"{round(tokens):,}"
    a = abs(tokens)
    if a >= 1_000_000:
        return f"{_sig3(tokens / 1_000_000)}M tokens"
    if a >= 1000:
        return f"{_sig3(tokens / 1000)}K tokens"
    return f"{round(tokens)} tokens"


@dash_when_unknown
def fmt_count(n: float) -> str:
    """A plain count with thousands separators, "2,300"; "—" when unknown."""
    return f"{round(n):,}"


@dash_when_unknown
def fmt_duration(seconds: float, *, approx: bool = True) -> str:
    """Durations for forecasts: "45 s", "≈ 1 min", "≈ 2 h 5 min", "≈ 3 d"; under a minute stays exact."""
    s = max(0.0, seconds)
    prefix = "≈ " if approx else ""
    if s < 60:
        return f"{s:.0f} s" if s >= 10 else f"{s:.1f} s"
    if s < 3600:
        return f"{prefix}{round(s / 60)} min"
    if s < 86400:
        h, m = divmod(round(s / 60), 60)
        return f"{prefix}{h} h" if m == 0 else f"{prefix}{h} h {m} min"
    return f"{prefix}{s / 86400:.1f} d"


@dash_when_unknown
def fmt_bandwidth(bytes_per_s: float) -> str:
    """Memory/PCIe bandwidth in decimal units as vendors quote it: "936 GB/s", "31.5 GB/s", "850 MB/s"."""
    a = abs(bytes_per_s)
    for unit, size in (("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if a >= size:
            return f"{_sig3(bytes_per_s / size)} {unit}"
    return f"{bytes_per_s:.0f} B/s"


@dash_when_unknown
def fmt_percent(fraction: float, *, digits: int = 0) -> str:
    """A fraction (0.63) as a percentage ("63%"); "—" when unknown."""
    return f"{fraction * 100:.{digits}f}%"
