"""Measured speed-vs-context curves drawn on their own: a sweep's (its points to the deepest depth and its ceiling), or
two side by side (File ▸ Compare…, ``kvmon compare``), with their table under the plot, saved as PNG with the
caption strip. The first curve is in decode's colour, the second in the compared curve's; each ceiling dashed in its
curve's colour. ``CurvesDialog`` is what the sweep and compare dialogs share around the plot.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from kvmon import __version__
from kvmon.core.compare import Curve, curve_of_sweep
from kvmon.core.redact import scrub
from kvmon.core.snapshot import Snapshot
from kvmon.core.sweep import SweepResult
from kvmon.core.sweep_table import table_lines
from kvmon.gui import theme
from kvmon.gui.widgets import TokenAxis, legend_below, make_plot, nice_ceiling

COLORS = ("decode", "compared")
SYMBOLS = ("o", "t")
SAVE_FILTERS = {"png": "PNG image (*.png)", "csv": "CSV (*.csv)", "json": "JSON (*.json)"}


class CurvesPlot(QtWidgets.QWidget):
    """One or two curves on one plot, the table of them beneath."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        lay = QtWidgets.QVBoxLayout(self)
        lay.setContentsMargins(theme.PAD, theme.PAD, theme.PAD, theme.PAD)
        self.plot = make_plot("Speed vs context depth", "context", "tokens", "decode", "tok/s",
                              axis_items={"bottom": TokenAxis(orientation="bottom")})
        legend_below(self.plot, 2)
        lay.addWidget(self.plot, 1)
        self.table = QtWidgets.QLabel(textFormat=QtCore.Qt.TextFormat.PlainText,
                                      alignment=QtCore.Qt.AlignmentFlag.AlignHCenter)
        self.table.setFont(QtGui.QFontDatabase.systemFont(QtGui.QFontDatabase.SystemFont.FixedFont))
        lay.addWidget(self.table)

    def show_curves(self, curves: Sequence[Curve], title: str, table: Sequence[str] = ()) -> None:
        """Draw ``curves`` (one or two) and ``table`` beneath; the y axis fits every point and ceiling."""
        pi = self.plot.getPlotItem()
        for item in list(pi.listDataItems()):
            pi.removeItem(item)
        pi.legend.clear()
        pi.setTitle(title)
        ys, xs = [1.0], [1.0]
        alone = len(curves) == 1
        for i, c in enumerate(curves[:2]):
            color = theme.color(COLORS[i])
            if c.ceiling:
                arr = np.asarray(c.ceiling, dtype=float)
                pen = pg.mkPen(color, width=1.5, style=QtCore.Qt.PenStyle.DashLine)
                name = "ceiling (memory bus)" if alone else f"ceiling, {c.label}"
                pi.addItem(pg.PlotDataItem(arr[:, 0], arr[:, 1], pen=pen, name=name))
                ys.append(float(arr[:, 1].max()))
                xs.append(float(arr[:, 0].max()))
            if c.points:
                pts = np.asarray(c.points, dtype=float)
                pi.addItem(pg.PlotDataItem(pts[:, 0], pts[:, 1], pen=pg.mkPen(color, width=1.5), symbol=SYMBOLS[i],
                                           symbolSize=8, symbolPen=None, symbolBrush=pg.mkBrush(color),
                                           name="measured decode" if alone else c.label))
                ys.append(float(pts[:, 1].max()))
                xs.append(float(pts[:, 0].max()))
        pi.setYRange(0, nice_ceiling(max(ys) * 1.05), padding=0)
        points_end = max((c.points[-1][0] for c in curves if c.points), default=max(xs))
        pi.setXRange(0, max(points_end * 1.05, 1.0), padding=0.02)
        self.table.setText("\n".join(table))
        self.table.setVisible(bool(table))

    def show_sweep(self, r: SweepResult) -> None:
        """A sweep's points to its deepest depth, its ceiling, and its table."""
        self.show_curves([curve_of_sweep(r)], f"Sweep of {r.model or 'the model'} to {r.depth_reached:,} tokens",
                         table_lines(r.rows))

    def image(self, caption: str) -> QtGui.QImage:
        """The widget as an image with the caption strip below it."""
        from kvmon.gui.caption import with_caption

        self.plot.getPlotItem().getViewBox().update()
        QtWidgets.QApplication.processEvents()
        return with_caption(self.grab().toImage(), scrub(caption), dark=theme.is_dark())


def sweep_caption(result: SweepResult, snap: Snapshot) -> str:
    """What a sweep's picture shows, without the window around it: model, cache, devices, context, server, when."""
    import time

    from kvmon.gui.caption import gpu_text

    m = snap.model
    model = " ".join(x for x in (m.name or "model", f"({m.quantization})" if m.quantization else "") if x)
    kv = f"KV {m.kv_type_k}/{m.kv_type_v}" if m.kv_type_k else ""
    ctx = f"n_ctx {m.n_ctx:,}" if m.n_ctx else ""
    server = f"{snap.backend} {snap.server_version or ''}".strip() if snap.backend else ""
    when = "swept " + time.strftime("%Y-%m-%d %H:%M", time.localtime(result.started_unix_s or time.time()))
    gen = f"{result.generate} tokens generated at each depth"
    return " · ".join(x for x in (model, kv, gpu_text(snap), ctx, server, gen, when, f"kvmon {__version__}") if x)


def say(label: QtWidgets.QLabel, text: str, *, warn: bool = False) -> None:
    """Show ``text`` in ``label``; a warning in the warning colour."""
    label.setText(text)
    label.setStyleSheet(f"color: {theme.hex_color('warning')}" if warn else "")


class CurvesDialog(QtWidgets.QDialog):
    """A dialog around a ``CurvesPlot``, its Save buttons (one per kind: each asks where, then ``save``) and Close."""

    save_title = "Save"
    plot: CurvesPlot  # made by the dialog where it goes in the focus order

    def buttons(self, first: Sequence[QtWidgets.QPushButton], kinds: Sequence[str]) -> QtWidgets.QHBoxLayout:
        """The row of ``first``, a Save button for each of ``kinds`` (off until there is something to save), Close."""
        row = QtWidgets.QHBoxLayout()
        self.save_buttons = [QtWidgets.QPushButton("Save picture…" if k == "png" else f"Save {k.upper()}…")
                             for k in kinds]
        for b, kind in zip(self.save_buttons, kinds, strict=True):
            b.clicked.connect(lambda _c=False, kind=kind: self._ask_save(kind))
            b.setEnabled(False)
        close = QtWidgets.QPushButton("Close")
        close.clicked.connect(self.close)
        for b in (*first, *self.save_buttons):
            row.addWidget(b)
        row.addStretch(1)
        row.addWidget(close)
        return row

    def default_name(self, kind: str) -> str:
        """The file name a save of ``kind`` offers."""
        raise NotImplementedError

    def contents(self, kind: str) -> str | None:
        """What a save of ``kind`` writes: the text of a CSV or JSON, the picture's caption for PNG (None: nothing
        is shown to save)."""
        raise NotImplementedError

    def _ask_save(self, kind: str) -> None:
        path, _f = QtWidgets.QFileDialog.getSaveFileName(self, self.save_title, self.default_name(kind),
                                                         SAVE_FILTERS[kind])
        if path:
            self.save(kind, path)

    def save(self, kind: str, path: str) -> None:
        """Write what is shown as a picture (caption strip included), CSV or JSON."""
        text = self.contents(kind)
        if text is None:
            return
        if kind == "png":
            # PySide6 takes the image format as str (its stub says bytes)
            self.plot.image(text).save(path, "PNG")  # type: ignore[call-overload]
        else:
            Path(path).write_text(text, encoding="utf-8")


def save_png(path: str | Path, caption: str, draw: Callable[[CurvesPlot], None],
             size: tuple[int, int] = (1100, 720)) -> None:
    """Draw curves offscreen (``draw`` shows them) and save the picture, caption strip included, as PNG; raises
    OSError when the file cannot be written."""
    from kvmon.gui.qtplatform import startup_problem

    # a command line's picture: offscreen when there is no display (a server), themed like the window
    if "QT_QPA_PLATFORM" not in os.environ and sys.platform.startswith("linux") and startup_problem() is not None:
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    if QtWidgets.QApplication.instance() is None:
        theme.apply(QtWidgets.QApplication(["kvmon"]))
    w = CurvesPlot()
    w.resize(*size)
    draw(w)
    w.show()
    QtWidgets.QApplication.processEvents()
    img = w.image(caption)
    w.close()
    # PySide6 takes the image format as str (its stub says bytes)
    if not img.save(str(path), "PNG"):  # type: ignore[call-overload]
        raise OSError(f"{path}: the picture could not be written")
