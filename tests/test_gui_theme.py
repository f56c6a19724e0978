"""Theme colours: the rich-text hex of a quantity is the colour its pens and brushes use, in both schemes."""

from __future__ import annotations

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
