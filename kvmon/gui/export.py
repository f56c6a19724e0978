"""Exports of what the dashboard shows: window or panel → PNG (with a caption strip), plot → SVG or CSV, clipboard.

"The window" as a picture is its dashboard: the window less its menu bar, toolbars and status bar (a pressed button
and a menu are no part of what is shared), with the caption strip below it.

Every text written into an export passes ``caption.scrub`` (no credentials in a URL, no API key), and the
default file name carries the model and a timestamp. ``install_actions`` adds the File/Export menu, a toolbar and
shortcuts to a MainWindow.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import math
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6 import QtCore, QtGui, QtWidgets

from kvmon.core.snapshot import Snapshot
from kvmon.gui import PANEL_ATTRS, caption, theme

if TYPE_CHECKING:  # the plotting library loads with the first plot, not with the menus
    import numpy as np
    import pyqtgraph as pg

PLOT_PANELS = ("speed-vs-context", "speed-over-time")  # the panels with a plot: SVG and CSV exports
SVG_NS = "http://www.w3.org/2000/svg"


class ExportError(RuntimeError):
    """An export that could not be written (the message says which file and why)."""


def panel_widget(win: Any, name: str | None) -> QtWidgets.QWidget:
    """The window's dashboard (``None``: the window without its menu bar, toolbars and status bar) or one named
    panel; 'what-if' is built on demand."""
    if name is None:
        return win.centralWidget() if isinstance(win, QtWidgets.QMainWindow) else win
    if name not in PANEL_ATTRS:
        raise ExportError(f"unknown panel {name!r}; one of {', '.join(PANEL_ATTRS)}")
    if name == "what-if":
        return win.show_whatif()
    return getattr(win, PANEL_ATTRS[name])


def grab_image(widget: QtWidgets.QWidget) -> QtGui.QImage:
    """The widget as an image at its screen's device pixel ratio (2× on a HiDPI screen).

    Every label (any widget with a ``text`` and a ``setText``) is scrubbed of credentials for the moment of the
    grab (a URL with user:password or a token in its query must never reach a shared picture), then restored.
    """
    app = QtWidgets.QApplication.instance()
    changed: list[tuple[Any, str]] = []
    labels: list[Any] = [w for w in (widget, *widget.findChildren(QtWidgets.QWidget))  # any with text/setText
              if callable(getattr(w, "text", None)) and callable(getattr(w, "setText", None))
              and not isinstance(w, QtWidgets.QLineEdit | QtWidgets.QTextEdit)]
    for lbl in labels:
        text = lbl.text()
        clean = caption.scrub(text)
        if clean != text:
            changed.append((lbl, text))
            lbl.setText(clean)
    try:
        if app is not None:
            app.processEvents()
        return widget.grab().toImage()
    finally:
        for lbl, text in changed:
            lbl.setText(text)


SnapshotArg = Snapshot | None | Callable[[], Snapshot | None]  # a snapshot, or how to get the one shown after a grab


def _resolve(snap: SnapshotArg) -> Snapshot | None:
    return snap() if callable(snap) else snap


def shown_snapshot(win: Any) -> Snapshot | None:
    """The snapshot a window's panels show now (a poll that arrived since but was not drawn is not it)."""
    return getattr(win, "shown", getattr(win, "last", None))


def captioned(widget: QtWidgets.QWidget, snap: SnapshotArg, *, with_caption: bool = True
              ) -> tuple[QtGui.QImage, str | None]:
    """``grab_image`` plus the caption strip, and the caption's text. ``snap`` may be a callable, asked after the
    grab: a poll that arrives while the picture is taken must not give the caption other numbers than the header."""
    img = grab_image(widget)
    if not with_caption:
        return img, None
    text = caption.caption_text(_resolve(snap))
    return caption.with_caption(img, text, dark=theme.is_dark()), text


def captioned_image(widget: QtWidgets.QWidget, snap: SnapshotArg, *, with_caption: bool = True) -> QtGui.QImage:
    """``grab_image`` plus the caption strip that says what the picture shows."""
    return captioned(widget, snap, with_caption=with_caption)[0]


def save_png(widget: QtWidgets.QWidget, path: str | Path, snap: SnapshotArg, *,
             with_caption: bool = True) -> QtGui.QImage:
    """Write the widget as PNG (with caption); returns the image; raises ExportError when it cannot write."""
    img = captioned_image(widget, snap, with_caption=with_caption)
    # PySide6 takes the image format as str (its stub says bytes)
    if not img.save(str(path), "PNG"):  # type: ignore[call-overload]
        raise ExportError(f"could not write {path}")
    return img


# --- plots: data and SVG ------------------------------------------------------------------------------------
def plot_of(panel: Any) -> pg.PlotWidget:
    """The PlotWidget of a plot panel (``panel.plot``)."""
    import pyqtgraph as pg

    plot = getattr(panel, "plot", None)
    if not isinstance(plot, pg.PlotWidget):
        raise ExportError(f"{type(panel).__name__} has no plot")
    return plot


def _name(item: Any, fallback: str) -> str:
    n = item.name() if hasattr(item, "name") else None
    return str(n) if n else fallback


def plotted_series(panel: Any) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(name, x, y) of every data item on the panel's plot, including items on a second axis (``panel.prefill``)."""
    import numpy as np

    plot = plot_of(panel)
    items: list[Any] = list(plot.getPlotItem().listDataItems())
    own = getattr(panel, "curves", None)  # a panel that draws its own curves (speed over time) lists them
    if callable(own):
        items.extend(c for c in own() if c not in items)
    for attr in ("prefill", "here"):  # items outside the legend or on another ViewBox
        extra = getattr(panel, attr, None)
        if extra is not None and extra not in items and hasattr(extra, "getData"):
            items.append(extra)
    out: list[tuple[str, np.ndarray, np.ndarray]] = []
    used: set[str] = set()
    for i, item in enumerate(items):
        x, y = item.getData()
        name = _name(item, next((a for a in ("prefill", "here", "measured", "decode", "ceiling", "forecast",
                                              "forecast_low", "forecast_high", "earlier")
                                 if getattr(panel, a, None) is item), f"series{i}"))
        base, k = name, 2
        while name in used:
            name, k = f"{base} {k}", k + 1
        used.add(name)
        xs = np.asarray([] if x is None else x, dtype=float)
        ys = np.asarray([] if y is None else y, dtype=float)
        out.append((name, xs, ys))
    return out


def _axis(plot: pg.PlotWidget, side: str) -> str:
    ax = plot.getPlotItem().getAxis(side)
    label = str(ax.labelText or side)
    return f"{label} ({ax.labelUnits})" if ax.labelUnits else label


def _cell(v: float) -> str:
    return repr(float(v)) if math.isfinite(v) else ""


def plot_csv_text(panel: Any) -> str:
    """The plotted data as CSV in long form: series, x, y (unknown points: empty cells)."""
    plot = plot_of(panel)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["series", getattr(panel, "x_csv_label", None) or _axis(plot, "bottom"), _axis(plot, "left")])
    for name, x, y in plotted_series(panel):
        for a, b in zip(x, y, strict=False):
            w.writerow([caption.scrub(name), _cell(a), _cell(b)])
    return buf.getvalue()


def _write_text(path: str | Path, text: str) -> str:
    """Write ``text`` to ``path``; raises ExportError saying which file and why when it cannot."""
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ExportError(f"could not write {path}: {exc.strerror or exc}") from None
    return text


def save_plot_csv(panel: Any, path: str | Path) -> int:
    """Write the panel's plotted data as CSV; returns the number of data rows."""
    return _write_text(path, plot_csv_text(panel)).count("\n") - 1


def _svg_pyqtgraph(plot: pg.PlotWidget) -> str:
    from pyqtgraph.exporters import SVGExporter

    data = SVGExporter(plot.getPlotItem()).export(toBytes=True)
    return data.decode("utf-8") if isinstance(data, bytes | bytearray) else str(data)


@contextlib.contextmanager
def _no_item_caches(plot: pg.PlotWidget) -> Iterator[None]:
    """The plot's scene items drawn directly for a while (their pixmap caches off), then cached again."""
    none = QtWidgets.QGraphicsItem.CacheMode.NoCache
    cached = [(item, item.cacheMode()) for item in plot.scene().items() if item.cacheMode() != none]
    for item, _mode in cached:
        item.setCacheMode(none)
    try:
        yield
    finally:
        for item, mode in cached:
            item.setCacheMode(mode)


def _svg_qt(widget: QtWidgets.QWidget) -> str:
    """Render the widget through QSvgGenerator: the fallback when pyqtgraph's exporter fails (its path parser
    does not accept the closed-path ``Z`` that Qt ≥ 6.11 writes)."""
    from PySide6 import QtSvg

    buf = QtCore.QBuffer()
    buf.open(QtCore.QIODevice.OpenModeFlag.WriteOnly)
    gen = QtSvg.QSvgGenerator()
    gen.setOutputDevice(buf)
    gen.setSize(widget.size())
    gen.setViewBox(QtCore.QRect(QtCore.QPoint(0, 0), widget.size()))
    gen.setTitle("kvmon")
    with QtGui.QPainter(gen) as p:  # ended whatever happens: the SVG is complete only then
        if isinstance(widget, QtWidgets.QGraphicsView):
            widget.render(p)  # the view's scene, scaled to the page
        else:
            widget.render(p, QtCore.QPoint())  # a widget and its children as laid out
    return bytes(buf.data().data()).decode("utf-8")


def plot_svg_text(panel: Any, snap: SnapshotArg, *, engine: str = "auto") -> str:
    """The panel's plot as SVG with the caption as a text line below it; ``engine``: auto | pyqtgraph | qt."""
    plot = plot_of(panel)
    text: str | None = None
    if getattr(panel, "svg_as_shown", False) and engine == "auto":  # a view of its own items (speed over time)
        with _no_item_caches(plot):
            text = _svg_qt(plot)  # the whole view as on screen: chart, lane, time axis, legend
    elif engine in ("auto", "pyqtgraph"):
        try:
            text = _svg_pyqtgraph(plot)
        except (ValueError, IndexError):  # pyqtgraph 0.14 with Qt ≥ 6.11: 'Z' in path data
            if engine == "pyqtgraph":
                raise
    if text is None:
        with _no_item_caches(plot):  # cached items would go into the SVG as pictures, not as paths and text
            text = _svg_qt(plot)
    return _add_svg_caption(caption.scrub(text), caption.caption_text(_resolve(snap)))


def _add_svg_caption(svg: str, line: str) -> str:
    """Append a <desc> and a visible <text> caption below the drawing (the canvas grows by one line)."""
    ET.register_namespace("", SVG_NS)
    ET.register_namespace("xlink", "http://www.w3.org/1999/xlink")
    try:
        root = ET.fromstring(svg)
    except ET.ParseError as exc:
        raise ExportError(f"the plot's SVG does not parse: {exc}") from None
    desc = ET.SubElement(root, f"{{{SVG_NS}}}desc")
    desc.text = line
    vb = (root.get("viewBox") or "").replace(",", " ").split()
    try:
        x0, y0, w, h = (float(v) for v in vb)
    except ValueError:
        x0 = y0 = 0.0
        w = float(str(root.get("width", "800")).rstrip("px") or 800)
        h = float(str(root.get("height", "600")).rstrip("px") or 600)
    extra = 18.0
    root.set("viewBox", f"{x0:g} {y0:g} {w:g} {h + extra:g}")
    if root.get("height"):
        root.set("height", f"{h + extra:g}")
    if root.get("width"):
        root.set("width", f"{w:g}")
    t = ET.SubElement(root, f"{{{SVG_NS}}}text", {"x": f"{x0 + 4:g}", "y": f"{y0 + h + 13:g}",
                                                  "font-family": "sans-serif", "font-size": "10",
                                                  "fill": theme.foreground()})
    t.text = line
    return ET.tostring(root, encoding="unicode")


def save_plot_svg(panel: Any, path: str | Path, snap: SnapshotArg, *, engine: str = "auto") -> str:
    """Write the panel's plot as SVG; returns the text."""
    return _write_text(path, plot_svg_text(panel, snap, engine=engine))


# --- menu, toolbar, shortcuts ------------------------------------------------------------------------------------
def ask_path(win: QtWidgets.QWidget, title: str, suggested: str, filt: str) -> str | None:
    """A save dialog pre-filled with the suggested name; None when cancelled."""
    path, _ = QtWidgets.QFileDialog.getSaveFileName(win, title, suggested, filt)
    return path or None


class ExportActions(QtCore.QObject):
    """The window's export actions; the panels are looked up at the moment of use (a theme switch rebuilds them)."""

    def __init__(self, win: Any, ask: Callable[[QtWidgets.QWidget, str, str, str], str | None] = ask_path) -> None:
        super().__init__(win)
        self.win = win
        self.ask = ask
        self.actions: dict[str, QtGui.QAction] = {}

    def _shown(self) -> Snapshot | None:  # asked after a grab too: the numbers the picture shows
        return shown_snapshot(self.win)

    def _say(self, text: str) -> None:
        self.win.statusBar().showMessage(caption.scrub(text), 6000)

    def save_png(self, panel: str | None = None, path: str | None = None) -> str | None:
        """Window or panel → PNG with caption; asks for a file name when ``path`` is None."""
        return self._save("Save image", panel or "window", "png", "PNG image (*.png)", path,
                          lambda p: save_png(panel_widget(self.win, panel), p, self._shown))

    def save_svg(self, panel: str, path: str | None = None) -> str | None:
        """A plot panel → SVG."""
        return self._save("Save plot as SVG", panel, "svg", "SVG image (*.svg)", path,
                          lambda p: save_plot_svg(panel_widget(self.win, panel), p, self._shown))

    def save_csv(self, panel: str, path: str | None = None) -> str | None:
        """A plot panel's plotted data → CSV."""
        return self._save("Save plot data as CSV", panel, "csv", "CSV (*.csv)", path,
                          lambda p: save_plot_csv(panel_widget(self.win, panel), p))

    def copy(self, panel: str | None = None) -> QtGui.QImage:
        """Window or panel (with caption) → clipboard."""
        img = captioned_image(panel_widget(self.win, panel), self._shown)
        QtGui.QGuiApplication.clipboard().setImage(img)
        self._say("Copied the image to the clipboard")
        return img

    def _save(self, title: str, what: str, ext: str, filt: str, path: str | None,
              write: Callable[[str], object]) -> str | None:
        """Write to ``path`` (asked for, under a name with the model and the time, when None) and say how it went."""
        path = path or self.ask(self.win, title, caption.default_filename(self._shown(), ext, what=what), filt)
        if not path:
            return None
        try:
            write(path)
        except ExportError as exc:
            self._say(f"Export failed: {exc}")
            return None
        self._say(f"Saved {path}")
        return path

    def add(self, key: str, text: str, fn: Callable[[], object], menu: QtWidgets.QMenu,
            shortcut: str | None = None) -> QtGui.QAction:
        """One action in ``menu`` (and in ``self.actions`` under ``key``)."""
        act = QtGui.QAction(text, self.win)
        if shortcut:
            act.setShortcut(QtGui.QKeySequence(shortcut))
        act.triggered.connect(lambda _checked=False: fn())
        menu.addAction(act)
        self.actions[key] = act
        return act


def install_actions(win: Any, menu: QtWidgets.QMenu, toolbar: QtWidgets.QToolBar | None = None,
                    *, panels: Sequence[str] = tuple(PANEL_ATTRS)) -> ExportActions:
    """Add the export actions to ``menu`` (and the most used ones to ``toolbar``)."""
    ex = ExportActions(win)
    ex.add("png", "Save window as PNG…", ex.save_png, menu, "Ctrl+S")
    ex.add("copy", "Copy window image", ex.copy, menu, "Ctrl+Shift+C")
    sub = menu.addMenu("Save panel as PNG")
    for name in panels:
        ex.add(f"png:{name}", name, functools.partial(ex.save_png, name), sub)
    sub_svg = menu.addMenu("Save plot as SVG")
    sub_csv = menu.addMenu("Save plot data as CSV")
    for name in PLOT_PANELS:
        ex.add(f"svg:{name}", name, functools.partial(ex.save_svg, name), sub_svg,
               "Ctrl+Shift+S" if name == "speed-vs-context" else None)
        ex.add(f"csv:{name}", name, functools.partial(ex.save_csv, name), sub_csv)
    if toolbar is not None:
        toolbar.addAction(ex.actions["png"])
        toolbar.addAction(ex.actions["copy"])
    return ex
