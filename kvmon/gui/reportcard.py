"""The report card: one image that sums up a session — speed vs context with the ceiling, peak and final context,
efficiency, alerts seen, hardware and model, kvmon version — what a user posts in an issue thread.

The figures come from ``kvmon.core.summary`` (live, or from a recording); ``render`` draws them.
"""

from __future__ import annotations

import html
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from kvmon.core.snapshot import Snapshot
from kvmon.core.summary import Summary, summarize
from kvmon.core.units import (
    DASH,
    fmt_bytes,
    fmt_count,
    fmt_devices,
    fmt_duration,
    fmt_energy,
    fmt_joules_per_token,
    fmt_percent,
    fmt_tok_s,
    fmt_tokens,
)
from kvmon.core.words import alert_name, level_word
from kvmon.gui import caption, theme
from kvmon.gui.fmt import plain
from kvmon.gui.panels.latency import latency_text

CARD_SIZE = (1200, 760)


def _facts(sm: Summary) -> list[tuple[str, str]]:
    s = sm.last
    rows: list[tuple[str, str]] = []
    if s is not None:
        m = s.model
        params = f"{m.n_params / 1e9:.1f}B" if m.n_params else None
        rows.append(("Model", " · ".join(b for b in (m.name, m.arch, params, m.quantization) if b) or DASH))
        types = f"{m.kv_type_k}/{m.kv_type_v or m.kv_type_k}, " if m.kv_type_k else ""
        rows.append(("KV cache", f"{types}context {fmt_tokens(m.n_ctx)}, {fmt_bytes(m.kv_bytes_per_token)} per token"))
        vram = sum(g.vram_total_bytes or 0 for g in s.gpus) or None
        rows.append(("Hardware", f"{caption.gpu_text(s)}" + (f", {fmt_bytes(vram)} VRAM" if vram else "")))
        rows.append(("Server", f"{caption.server_label(s) or DASH} {s.server_version or ''}".strip()))
    span = (sm.end_wall - sm.start_wall) if sm.start_wall is not None and sm.end_wall is not None else None
    start = time.strftime("%Y-%m-%d %H:%M", time.localtime(sm.start_wall)) if sm.start_wall else DASH
    rows.append(("Session", f"{start}, {fmt_duration(span)}, {sm.n_snapshots} snapshots"))
    rows.append(("Context", f"peak {fmt_tokens(sm.peak_context_tokens)}, final {fmt_tokens(sm.final_context_tokens)}"))
    d = sm.last_decoding
    final = (f", last {fmt_tok_s(d.decode_tok_s)} of {fmt_tok_s(d.ceiling_tok_s)} ceiling at "
             f"{fmt_tokens(d.context_tokens)}") if d is not None else ""
    rows.append(("Decode", f"peak {fmt_tok_s(sm.peak_decode_tok_s)}{final}"))
    rows.append(("Efficiency", f"median {fmt_percent(sm.median_efficiency)}, last {fmt_percent(sm.final_efficiency)}"
                               " of the memory-bandwidth ceiling"))
    if s is not None and s.latency is not None:  # the session's replies, as the last snapshot sums them
        rows.append(("Replies", latency_text(s)[0]))
    if s is not None and s.energy is not None and s.energy.energy_j is not None:
        e = s.energy
        per_wh = f" · {fmt_count(round(e.tokens_per_wh))} tokens/Wh" if e.tokens_per_wh else ""
        rows.append(("Energy", f"{fmt_joules_per_token(e.joules_per_token)}{per_wh} · {fmt_energy(e.energy_j)} over "
                               f"{fmt_duration(e.seconds)} ({fmt_devices(e.devices)})"))
    return rows


class ReportCard(QtWidgets.QFrame):
    """The card as a widget: title, facts, the speed-vs-context plot, alerts seen, footer."""

    def __init__(self, sm: Summary, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAutoFillBackground(True)
        pal = self.palette()
        pal.setColor(QtGui.QPalette.ColorRole.Window, QtGui.QColor(theme.background()))
        pal.setColor(QtGui.QPalette.ColorRole.WindowText, QtGui.QColor(theme.foreground()))
        self.setPalette(pal)
        lay = QtWidgets.QVBoxLayout(self)
        lay.setContentsMargins(16, 12, 16, 10)
        name = (sm.last.model.name if sm.last else None) or "no model"
        title = QtWidgets.QLabel(f"<b style='font-size:16pt'>kvmon report card</b> &nbsp; "
                                 f"{html.escape(caption.scrub(name))}")
        lay.addWidget(title)
        v = sm.last.verdict if sm.last is not None else None
        if v is not None:  # how the session stood at its end, as the headline said it
            self.headline = QtWidgets.QLabel(f"<b style='color:{theme.hex_color(v.level.value)}'>"
                                             f"{html.escape(caption.scrub(v.sentence))}</b>")
            self.headline.setWordWrap(True)
            lay.addWidget(self.headline)
        body = QtWidgets.QHBoxLayout()
        facts = QtWidgets.QLabel("<table cellspacing=3>" + "".join(
            f"<tr><td style='color:{theme.hex_color('muted')}'>{k}</td><td>{html.escape(caption.scrub(v))}</td></tr>"
            for k, v in _facts(sm)) + "</table>")
        facts.setWordWrap(True)
        facts.setAlignment(QtCore.Qt.AlignmentFlag.AlignTop)
        body.addWidget(facts, 2)
        self.plot = self._plot(sm)
        body.addWidget(self.plot, 3)
        lay.addLayout(body, 1)
        if sm.alerts:
            lines = [f"<span style='color:{theme.hex_color(a.level.value)}'>●</span> "
                     f"<b>{html.escape(alert_name(a.code))}</b> ({level_word(a.level.value)}, in {a.count} polls): "
                     f"{html.escape(plain(caption.scrub(a.message)))}" for a in sm.alerts[:6]]
            more = f"<br>… and {len(sm.alerts) - 6} more" if len(sm.alerts) > 6 else ""
            alerts = QtWidgets.QLabel("<b>Alerts seen</b><br>" + "<br>".join(lines) + more)
        else:
            alerts = QtWidgets.QLabel("<b>Alerts seen</b>: none")
        alerts.setWordWrap(True)
        lay.addWidget(alerts)
        foot = QtWidgets.QLabel(f"<span style='color:{theme.hex_color('muted')}'>"
                                f"{html.escape(caption.caption_text(sm.last))}</span>")
        foot.setWordWrap(True)
        lay.addWidget(foot)

    @staticmethod
    def _plot(sm: Summary) -> pg.PlotWidget:
        from kvmon.gui.widgets import TokenAxis, make_plot, nice_ceiling

        w = make_plot("Speed vs context depth", "context", "tokens", "decode", "tok/s",
                      axis_items={"bottom": TokenAxis(orientation="bottom")})
        pi = w.getPlotItem()
        pi.addLegend(offset=(-5, 5), labelTextSize="8pt")
        ys = [1.0]
        x_max = 8192.0
        if sm.ceiling_curve:
            arr = np.asarray(sm.ceiling_curve, dtype=float)
            pi.plot(arr[:, 0], arr[:, 1], pen=theme.pen("ceiling", 2.0), name="ceiling (memory bus)")
            ys.append(float(np.nanmax(arr[:, 1])))
            x_max = max(x_max, float(arr[:, 0].max()))
        if sm.points:
            pts = np.asarray(sm.points, dtype=float)
            pi.addItem(pg.ScatterPlotItem(pts[:, 0], pts[:, 1], size=4, pen=None, brush=theme.brush("decode", 180),
                                          name="measured decode"))
            ys.append(float(pts[:, 1].max()))
            x_max = max(x_max, float(pts[:, 0].max()))
        if sm.peak_context_tokens:
            pi.addItem(pg.InfiniteLine(sm.peak_context_tokens, angle=90, movable=False,
                                       pen=pg.mkPen(theme.color("milestone"), style=QtCore.Qt.PenStyle.DashLine),
                                       label=f"peak {fmt_tokens(sm.peak_context_tokens)}",
                                       labelOpts={"position": 0.55, "color": theme.foreground()}))
        pi.setXRange(0, x_max, padding=0.02)
        pi.setYRange(0, nice_ceiling(max(ys) * 1.05), padding=0)
        w.setMinimumSize(560, 360)
        return w


def render(snapshots: Sequence[Snapshot] | Summary, size: tuple[int, int] = CARD_SIZE) -> QtGui.QImage:
    """The report card of these snapshots (or of a Summary) as an image (needs a QApplication; works offscreen)."""
    card = ReportCard(snapshots if isinstance(snapshots, Summary) else summarize(snapshots))
    card.setAttribute(QtCore.Qt.WidgetAttribute.WA_DontShowOnScreen, True)
    card.resize(*size)
    card.show()
    app = QtWidgets.QApplication.instance()
    if app is not None:
        app.processEvents()
    try:
        return card.grab().toImage()
    finally:
        card.close()
        card.deleteLater()


def save(snapshots: Sequence[Snapshot] | Summary, path: str | Path,
         size: tuple[int, int] = CARD_SIZE) -> QtGui.QImage:
    """Write the report card as PNG; raises OSError when the file cannot be written."""
    img = render(snapshots, size)
    # PySide6 takes the image format as str (its stub says bytes)
    if not img.save(str(path), "PNG"):  # type: ignore[call-overload]
        raise OSError(f"could not write {path}")
    return img
