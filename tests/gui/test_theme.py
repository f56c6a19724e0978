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
