"""One colour per quantity, defined once, for every panel; follows the system's dark or light scheme.

Panels ask ``theme.color("decode")`` or ``theme.pen("ceiling")`` and never spell a colour themselves. Qt only:
the plotting library takes its defaults from ``plot_options()`` when the first plot is made (it is not loaded
for the window's first frame).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Literal

from PySide6 import QtCore, QtGui, QtWidgets

# Quantity -> (dark-scheme colour, light-scheme colour). The single source of colour truth; docs/design.md says what
# each one means. A severity colour (ok, info, warning, critical) is never a quantity's.
_QUANTITIES: dict[str, tuple[str, str]] = {
    "decode": ("#64b5f6", "#1565c0"),
    "compared": ("#4dd0e1", "#00838f"),  # the second curve of a comparison (the first is decode's)
    "forecast": ("#b39ddb", "#7e57c2"),  # where decode is heading: dotted; its band the same hue, faint (never olive)
    "prefill": ("#ce93d8", "#8e24aa"),
    "ceiling": ("#e0e0e0", "#424242"),  # a limit, not a warning: neutral and dashed
    "weights": ("#7986cb", "#3949ab"),
    "kv_in_use": ("#5fd3c6", "#00897b"),  # bright: the part read for every token
    "kv_allocated": ("#2e6b64", "#a6d8d2"),  # the same hue, far from it in lightness: reserved, not yet read
    "draft": ("#9fa8da", "#7986cb"),  # speculative decoding's draft model: its weights and its KV cache
    "server_other": ("#a1887f", "#8d6e63"),
    "other_processes": ("#78848c", "#9e9e9e"),
    "unattributed": ("#f48fb1", "#d81b60"),  # memory in use that no part explains (shown as such, never as a part)
    "free": ("#2c3338", "#d9dee3"),  # a bar's empty track
    "limit": ("#cfd8dc", "#37474f"),  # a bar's 100 % mark (the end of VRAM, of RAM, a Mac's GPU limit, a bus's peak)
    "spill": ("#cfd8dc", "#37474f"),  # the memory bar's end, where the next allocation spills: the limit mark
    "bandwidth": ("#64b5f6", "#1565c0"),  # the bytes decode reads per second, on any device: decode's colour
    "milestone": ("#78909c", "#90a4ae"),
    "here": ("#ffffff", "#000000"),
    "recording": ("#f06292", "#c2185b"),  # the recording light (rose: not a severity's red)
    "ok": ("#66bb6a", "#2e7d32"),
    "info": ("#ecec93", "#6c5e13"),  # a pale khaki: every blue and grey here is a quantity's
    "warning": ("#ffb300", "#e65100"),
    "critical": ("#ef5350", "#c62828"),
    "muted": ("#8a969e", "#66737c"),  # secondary words (units, sources, "of ceiling")
    "code": ("#2e3338", "#eceff1"),  # the background of inline code (commands, flags) in messages
    "legend": ("#262b30", "#f3f5f6"),  # a plot legend's box, in its own row outside the data
}
SEVERITIES = ("ok", "info", "warning", "critical")  # their colours mean a level, and nothing else

# The plots' small type size (points): their ticks, axis names, legends and the labels on the data.
PLOT_TEXT_PT = 8.0

# Quantities drawn dashed (a limit) or dotted (a forecast) wherever they appear.
PEN_STYLES = {"ceiling": QtCore.Qt.PenStyle.DashLine, "forecast": QtCore.Qt.PenStyle.DotLine}

# Three type sizes, in points relative to the application's font: secondary words, everything else, the headline.
Size = Literal["small", "body", "large"]
SIZES: dict[str, float] = {"small": -1.0, "body": 0.0, "large": 7.0}
# Spacing on one grid: every margin and gap is a multiple of UNIT pixels.
UNIT = 4
GAP = 2 * UNIT  # between panels, and the window's margins
PAD = UNIT  # inside a panel: between its lines and around its contents
WINDOW_SIZE = QtCore.QSize(1280, 800)  # the first start's size, where the screen has room for it
WINDOW_MINIMUM = QtCore.QSize(800, 600)  # the smallest size the layout is checked at (tests/acceptance/test_layout.py)
FRAME_ALLOWANCE = 32  # px of the screen's height a window manager's title bar takes


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


def mark(level: str | None) -> str:
    """The shape beside a line of this severity, so it reads without its colour: ● (ok, info, or a quantity),
    ▲ warning, ■ critical."""
    return {"warning": "▲", "critical": "■"}.get(level or "", "●")


def hex_color(quantity: str) -> str:
    """The colour as ``#rrggbb`` for rich text (straight from the table: labels ask for it on every poll)."""
    dark, light = _QUANTITIES[quantity]
    return (dark if _state.dark else light).lower()


def pen(quantity: str, width: float = 1.5) -> QtGui.QPen:
    """A cosmetic pen for a quantity; dashed for the ceiling, dotted for the forecast."""
    p = QtGui.QPen(color(quantity))
    p.setWidthF(width)
    p.setCosmetic(True)  # the width is in pixels at any zoom, as pyqtgraph's mkPen makes it
    p.setStyle(PEN_STYLES.get(quantity, QtCore.Qt.PenStyle.SolidLine))
    return p


def brush(quantity: str, alpha: int = 255) -> QtGui.QBrush:
    """A solid brush for a quantity (for bars and scatter symbols)."""
    c = color(quantity)
    c.setAlpha(alpha)
    return QtGui.QBrush(c)


QUANTITIES = tuple(_QUANTITIES)


def font(size: Size = "body", bold: bool = False) -> QtGui.QFont:
    """The application's font at one of the three type sizes (``SIZES``), bold when asked."""
    app = QtWidgets.QApplication.instance()
    f = QtGui.QFont(app.font()) if app is not None else QtGui.QFont()  # type: ignore[attr-defined]
    step = SIZES[size]
    if step and f.pointSizeF() > 0:
        f.setPointSizeF(max(6.0, f.pointSizeF() + step))
    elif step and f.pixelSize() > 0:  # a font set in pixels: the same steps at 96 dpi
        f.setPixelSize(max(8, round(f.pixelSize() + step * 4 / 3)))
    if bold:
        f.setBold(True)
    return f


def tint(widget: QtWidgets.QWidget, quantity: str | None) -> None:
    """Draw a widget's text in a quantity's (or a severity's) colour; ``None``: the palette's own again."""
    pal = widget.palette()
    c = color(quantity) if quantity else QtWidgets.QApplication.palette().color(QtGui.QPalette.ColorRole.WindowText)
    for role in (QtGui.QPalette.ColorRole.WindowText, QtGui.QPalette.ColorRole.Text,
                 QtGui.QPalette.ColorRole.ButtonText):
        pal.setColor(role, c)
    widget.setPalette(pal)


def fit_screen(win: QtWidgets.QWidget, size: QtCore.QSize) -> QtCore.QSize:
    """``size``, made smaller where the screen's available area (less the window's frame) is smaller."""
    screen = win.screen() or QtGui.QGuiApplication.primaryScreen()
    if screen is None:
        return size
    return size.boundedTo(screen.availableGeometry().size() - QtCore.QSize(0, FRAME_ALLOWANCE))
