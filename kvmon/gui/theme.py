"""One colour per quantity, defined once, for every panel; follows the system's dark or light scheme.

Panels ask ``theme.color("decode")`` or ``theme.pen("ceiling")`` and never spell a colour themselves. Qt only:
the plotting library takes its defaults from ``plot_options()`` when the first plot is made (it is not loaded
for the window's first frame).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from PySide6 import QtCore, QtGui, QtWidgets

# Quantity -> (dark-scheme colour, light-scheme colour). The single source of colour truth.
_QUANTITIES: dict[str, tuple[str, str]] = {
    "decode": ("#4fc3f7", "#0277bd"),
    "compared": ("#ffa726", "#d84315"),  # the second curve of a comparison (the first is decode's)
    "prefill": ("#ba68c8", "#7b1fa2"),
    "ceiling": ("#ffb74d", "#e65100"),
    "forecast": ("#81c784", "#2e7d32"),
    "weights": ("#5c6bc0", "#3949ab"),
    "kv_allocated": ("#26a69a", "#80cbc4"),
    "kv_in_use": ("#00796b", "#00796b"),
    "draft": ("#9fa8da", "#7986cb"),  # speculative decoding's draft model: its weights and its KV cache
    "server_other": ("#8d6e63", "#a1887f"),
    "other_processes": ("#9e9e9e", "#757575"),
    "unattributed": ("#9575cd", "#b39ddb"),  # memory in use that no part explains (shown as such, never as a part)
    "free": ("#37474f", "#e0e0e0"),
    "spill": ("#ef5350", "#c62828"),
    "host": ("#ffd54f", "#f9a825"),
    "bandwidth": ("#4dd0e1", "#00838f"),
    "pcie_rx": ("#f06292", "#ad1457"),
    "pcie_tx": ("#aed581", "#558b2f"),
    "milestone": ("#78909c", "#90a4ae"),
    "here": ("#ffffff", "#000000"),
    "info": ("#90caf9", "#1565c0"),
    "warning": ("#ffca28", "#ef6c00"),
    "critical": ("#ef5350", "#c62828"),
    "ok": ("#66bb6a", "#2e7d32"),
    "muted": ("#90a4ae", "#607d8b"),
    "code": ("#2e3338", "#eceff1"),  # the background of inline code (commands, flags) in messages
    "legend": ("#262b30", "#f3f5f6"),  # a plot legend's box, in its own row outside the data
}

# The plots' small type size (points): their ticks, axis names, legends and the labels on the data.
PLOT_TEXT_PT = 8.0

# Quantities drawn dashed wherever they appear.
DASHED = frozenset({"ceiling"})
DOTTED = frozenset({"forecast"})


@dataclass
class _State:
    dark: bool = True
    system_dark: bool | None = None  # what the desktop asked for when kvmon started (before any override)


_state = _State()


def detect_dark(app: QtWidgets.QApplication | None = None) -> bool:
    """True when the system asks for a dark scheme (or, when it does not say, when the palette is dark)."""
    app = app or QtWidgets.QApplication.instance()  # type: ignore[assignment]
    if app is None:
        return True
    scheme = app.styleHints().colorScheme()
    if scheme == QtCore.Qt.ColorScheme.Dark:
        return True
    if scheme == QtCore.Qt.ColorScheme.Light:
        return False
    window = app.palette().color(QtGui.QPalette.ColorRole.Window)
    return window.lightness() < 128


def system_dark(app: QtWidgets.QApplication | None = None) -> bool:
    """The desktop's own choice: its colour scheme when it says one, else what it said when kvmon started (the
    palette kvmon sets for a chosen scheme must not be mistaken for the desktop's)."""
    app = app or QtWidgets.QApplication.instance()  # type: ignore[assignment]
    if app is not None:
        scheme = app.styleHints().colorScheme()
        if scheme != QtCore.Qt.ColorScheme.Unknown:
            return scheme == QtCore.Qt.ColorScheme.Dark
    return _state.system_dark if _state.system_dark is not None else detect_dark(app)


def apply(app: QtWidgets.QApplication, dark: bool | None = None) -> None:
    """Set the scheme (None: the desktop's): the app palette, and the plots' background and foreground."""
    if _state.system_dark is None:
        _state.system_dark = detect_dark(app)
    _state.dark = system_dark(app) if dark is None else dark
    if "pyqtgraph" in sys.modules:  # plots made from now on take the scheme's colours
        sys.modules["pyqtgraph"].setConfigOptions(**plot_options())
    if _state.dark:
        pal = QtGui.QPalette()
        for role, c in (
            (QtGui.QPalette.ColorRole.Window, "#1e2124"),
            (QtGui.QPalette.ColorRole.WindowText, "#e0e0e0"),
            (QtGui.QPalette.ColorRole.Base, "#15171a"),
            (QtGui.QPalette.ColorRole.AlternateBase, "#23272b"),
            (QtGui.QPalette.ColorRole.Text, "#e0e0e0"),
            (QtGui.QPalette.ColorRole.Button, "#2a2e33"),
            (QtGui.QPalette.ColorRole.ButtonText, "#e0e0e0"),
            (QtGui.QPalette.ColorRole.ToolTipBase, "#2a2e33"),
            (QtGui.QPalette.ColorRole.ToolTipText, "#e0e0e0"),
            (QtGui.QPalette.ColorRole.Highlight, "#0277bd"),
            (QtGui.QPalette.ColorRole.HighlightedText, "#ffffff"),
            (QtGui.QPalette.ColorRole.PlaceholderText, "#78909c"),
        ):
            pal.setColor(role, QtGui.QColor(c))
        app.setPalette(pal)
    else:
        app.setPalette(app.style().standardPalette())


def plot_options() -> dict[str, Any]:
    """pyqtgraph's defaults for the scheme: no antialiasing, the plot background and foreground."""
    return {"antialias": False, "background": background(), "foreground": foreground()}


def is_dark() -> bool:
    """The scheme chosen by :func:`apply`."""
    return _state.dark


def background() -> str:
    """Plot background colour."""
    return "#15171a" if _state.dark else "#ffffff"


def foreground() -> str:
    """Axis and text colour for plots."""
    return "#b0bec5" if _state.dark else "#37474f"


def color(quantity: str) -> QtGui.QColor:
    """The colour of a quantity (see ``_QUANTITIES``) in the current scheme."""
    dark, light = _QUANTITIES[quantity]
    return QtGui.QColor(dark if _state.dark else light)


def hex_color(quantity: str) -> str:
    """The colour as ``#rrggbb`` for rich text (straight from the table: labels ask for it on every poll)."""
    dark, light = _QUANTITIES[quantity]
    return (dark if _state.dark else light).lower()


def pen(quantity: str, width: float = 1.5) -> QtGui.QPen:
    """A cosmetic pen for a quantity; dashed for the ceiling, dotted for the forecast."""
    p = QtGui.QPen(color(quantity))
    p.setWidthF(width)
    p.setCosmetic(True)  # the width is in pixels at any zoom, as pyqtgraph's mkPen makes it
    if quantity in DASHED:
        p.setStyle(QtCore.Qt.PenStyle.DashLine)
    elif quantity in DOTTED:
        p.setStyle(QtCore.Qt.PenStyle.DotLine)
    return p


def brush(quantity: str, alpha: int = 255) -> QtGui.QBrush:
    """A solid brush for a quantity (for bars and scatter symbols)."""
    c = color(quantity)
    c.setAlpha(alpha)
    return QtGui.QBrush(c)


QUANTITIES = tuple(_QUANTITIES)
