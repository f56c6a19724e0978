"""Theme colours: the rich-text hex of a quantity is the colour its pens and brushes use, in both schemes."""

from __future__ import annotations

import math

import pytest
from PySide6 import QtWidgets

from kvmon.gui import theme


@pytest.mark.parametrize("dark", [False, True])
def test_hex_colours_match_the_pens(qapp: QtWidgets.QApplication, dark: bool) -> None:
    was = theme.is_dark()
    theme.apply(qapp, dark)
    try:
        for quantity in theme.QUANTITIES:
            hex_ = theme.hex_color(quantity)
            assert hex_ == theme.color(quantity).name() and len(hex_) == 7
            assert theme.pen(quantity).color().name() == hex_
    finally:
        theme.apply(qapp, was)


SAME_AS = {"bandwidth": "decode", "spill": "limit"}  # one quantity under two names: the same colour on purpose


@pytest.mark.parametrize("dark", [False, True])
def test_severity_colours_are_for_severity_only(qapp: QtWidgets.QApplication, dark: bool) -> None:
    """No quantity is drawn in a severity's colour (an orange ceiling read as a warning), and no two quantities share
    one, but for a quantity known by two names."""
    was = theme.is_dark()
    theme.apply(qapp, dark)
    try:
        severity = {theme.hex_color(level) for level in theme.SEVERITIES}
        assert len(severity) == len(theme.SEVERITIES)
        quantities = [q for q in theme.QUANTITIES if q not in theme.SEVERITIES and q not in ("code", "legend")]
        for q in quantities:
            assert theme.hex_color(q) not in severity, q
        seen: dict[str, str] = {}
        for q in quantities:
            name = SAME_AS.get(q, q)
            other = seen.setdefault(theme.hex_color(q), name)
            assert other == name, f"{q} has {other}'s colour"
    finally:
        theme.apply(qapp, was)


@pytest.mark.parametrize("dark", [False, True])
def test_kv_in_use_and_kv_allocated_are_told_apart(qapp: QtWidgets.QApplication, dark: bool) -> None:
    """The cache in use (read for every token) and the cache allocated (reserved) differ by far in lightness, and
    the allocated part stands out from a bar's empty track."""
    was = theme.is_dark()
    theme.apply(qapp, dark)
    try:
        in_use, allocated, free = (theme.color(q).lightnessF() for q in ("kv_in_use", "kv_allocated", "free"))
        assert abs(in_use - allocated) >= 0.25
        assert abs(allocated - free) >= 0.05 or theme.color("kv_allocated").hsvSaturationF() > 0.3
    finally:
        theme.apply(qapp, was)


def test_three_type_sizes(qapp: QtWidgets.QApplication) -> None:
    sizes = {theme.font(size).pointSizeF() for size in ("small", "body", "large")}
    assert len(sizes) == 3 and theme.font("body").pointSizeF() == qapp.font().pointSizeF()


def _lab(hex_: str) -> tuple[float, float, float]:
    """CIE L*a*b* (D65) of an sRGB colour."""
    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(int(hex_[i:i + 2], 16) / 255) for i in (1, 3, 5))
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def delta_e(c1: str, c2: str) -> float:
    """CIEDE2000 colour difference of two sRGB colours: about 2 is just noticeable; 15 or more reads as another
    colour at a glance."""
    return _de2000(_lab(c1), _lab(c2))


def _de2000(lab1: tuple[float, float, float], lab2: tuple[float, float, float]) -> float:
    (l1, a1, b1), (l2, a2, b2) = lab1, lab2
    cb = (math.hypot(a1, b1) + math.hypot(a2, b2)) / 2
    g = 0.5 * (1 - math.sqrt(cb ** 7 / (cb ** 7 + 25 ** 7)))
    a1, a2 = (1 + g) * a1, (1 + g) * a2
    c1p, c2p = math.hypot(a1, b1), math.hypot(a2, b2)
    h1, h2 = math.degrees(math.atan2(b1, a1)) % 360, math.degrees(math.atan2(b2, a2)) % 360
    dh = 0.0 if c1p * c2p == 0 else (h2 - h1 + 180) % 360 - 180
    dhh = 2 * math.sqrt(c1p * c2p) * math.sin(math.radians(dh / 2))
    lm, cm = (l1 + l2) / 2, (c1p + c2p) / 2
    hm = h1 + h2 if c1p * c2p == 0 else (h1 + h2) / 2 if abs(h1 - h2) <= 180 else (h1 + h2 + 360 * (h1 + h2 < 360)
                                                                                    - 360 * (h1 + h2 >= 360)) / 2
    t = (1 - 0.17 * math.cos(math.radians(hm - 30)) + 0.24 * math.cos(math.radians(2 * hm))
         + 0.32 * math.cos(math.radians(3 * hm + 6)) - 0.20 * math.cos(math.radians(4 * hm - 63)))
    sl = 1 + 0.015 * (lm - 50) ** 2 / math.sqrt(20 + (lm - 50) ** 2)
    sc, sh = 1 + 0.045 * cm, 1 + 0.015 * cm * t
    rc = 2 * math.sqrt(cm ** 7 / (cm ** 7 + 25 ** 7))
    rt = -math.sin(math.radians(60 * math.exp(-(((hm - 275) / 25) ** 2)))) * rc
    dc = c2p - c1p
    return math.sqrt(((l2 - l1) / sl) ** 2 + (dc / sc) ** 2 + (dhh / sh) ** 2 + rt * (dc / sc) * (dhh / sh))


def test_the_colour_difference_is_the_standard_one() -> None:
    """Pairs of Sharma, Wu and Dalal's CIEDE2000 test data (2005), and white against black."""
    assert _de2000((50.0, 2.6772, -79.7751), (50.0, 0.0, -82.7485)) == pytest.approx(2.0425, abs=1e-4)
    assert _de2000((50.0, 2.5, 0.0), (73.0, 25.0, -18.0)) == pytest.approx(27.1492, abs=1e-4)
    assert _de2000((60.2574, -34.0099, 36.2677), (60.4626, -34.1751, 39.4387)) == pytest.approx(1.2644, abs=1e-4)
    assert delta_e("#ffffff", "#000000") == pytest.approx(100.0, abs=0.1)


@pytest.mark.parametrize("dark", [False, True])
def test_severity_colours_are_told_apart_from_every_quantity_and_each_other(qapp: QtWidgets.QApplication,
                                                                           dark: bool) -> None:
    """A level's colour is another colour at a glance from every quantity's (an info note beside the decode speed
    must not read as part of it) and from the other levels."""
    was = theme.is_dark()
    theme.apply(qapp, dark)
    try:
        quantities = [q for q in theme.QUANTITIES if q not in theme.SEVERITIES
                      and q not in ("code", "legend", "free", "here", "muted")]
        close = [(level, q, round(delta_e(theme.hex_color(level), theme.hex_color(q)), 1))
                 for level in theme.SEVERITIES for q in (*quantities, *theme.SEVERITIES)
                 if q != level and delta_e(theme.hex_color(level), theme.hex_color(q)) < 15]
        assert not close
    finally:
        theme.apply(qapp, was)
