"""Speed vs context depth, the hero: measured points, ceiling curve, fitted forecast, milestones, you-are-here."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtWidgets

from kvmon.core.points import ContextBins
from kvmon.core.snapshot import Snapshot
from kvmon.gui import fmt, theme
from kvmon.gui.widgets import TokenAxis, add_curve, cache_static, make_plot, nice_ceiling

MIN_FORECAST_POINTS = 10  # a fit of a handful of points near one depth extrapolates wildly: not drawn
MILESTONES = (8192, 32768, 65536, 131072, 262144, 524288, 1048576)


def forecast_curve(a_s: float, b_s_per_token: float, n_max: int, n_points: int = 128) -> tuple[np.ndarray, np.ndarray]:
    """tok/s = 1 / (a + b·context) from the fitted decode model, sampled up to ``n_max`` tokens."""
    x = np.linspace(0, n_max, n_points)
    y = 1.0 / (a_s + b_s_per_token * x)
    return x, y


class Dots(pg.ScatterPlotItem):
    """A scatter whose bounds are worked out once per change of its data or of the view, not on every repaint.

    pyqtgraph's scatter recomputes its bounds (data bounds plus the symbols' pixel padding through the device
    transform) each time the scene asks, several times per repaint; that was most of the cost of moving the
    depth marker a few pixels.
    """

    def __init__(self, *args: object, **kwargs: object) -> None:
        self._bounds: QtCore.QRectF | None = None
        super().__init__(*args, **kwargs)

    def prepareGeometryChange(self) -> None:  # new data, or the view's transform changed
        self._bounds = None
        super().prepareGeometryChange()

    def updateSpots(self, *args: object, **kwargs: object) -> None:  # symbol sizes set the pixel padding
        super().updateSpots(*args, **kwargs)
        self._bounds = None

    def boundingRect(self) -> QtCore.QRectF:
        if self._bounds is None:
            self._bounds = super().boundingRect()
        return self._bounds


class SpeedContextPanel(QtWidgets.QWidget):
    """Plot items made once; each refresh sets data only on the items whose inputs changed."""

    def __init__(self, bins: ContextBins, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.bins = bins
        lay = QtWidgets.QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        self.plot = make_plot("Speed vs context depth", "context", "tokens", "decode", "tok/s",
                              axis_items={"bottom": TokenAxis(orientation="bottom")})
        pi = self.plot.getPlotItem()
        pi.addLegend(offset=(-5, 5), labelTextSize="8pt")
        self.ceiling = add_curve(self.plot, "ceiling", "ceiling (memory bus)", width=2.0)
        self.forecast = add_curve(self.plot, "forecast", "forecast (fit)", width=2.0)
        self.measured = Dots(size=5, pen=None, brush=theme.brush("decode", 200), name="measured")
        pi.addItem(self.measured)
        self.here = Dots(size=13, symbol="o", pen=pg.mkPen(theme.color("here"), width=2),
                                       brush=theme.brush("decode"))
        pi.addItem(self.here)
        here_pen = pg.mkPen(theme.color("here"), width=1, style=QtCore.Qt.PenStyle.DotLine)
        self.here_line = pg.InfiniteLine(angle=90, movable=False, pen=here_pen, label="you are here",
                                         labelOpts={"position": 0.55, "color": theme.foreground()})
        self.here_line.hide()
        pi.addItem(self.here_line)
        self._milestone_lines: dict[int, pg.InfiniteLine] = {}
        for i, m in enumerate(sorted(MILESTONES)):
            # labels of neighbouring milestones sit at three heights so that 8K / 32K / 64K never overlap
            line = pg.InfiniteLine(pos=m, angle=90, movable=False,
                                   pen=pg.mkPen(theme.color("milestone"), width=1, style=QtCore.Qt.PenStyle.DashLine),
                                   label=fmt.ctx_label(m),
                                   labelOpts={"position": 0.05 + 0.11 * (i % 3), "color": theme.foreground()})
            line.hide()
            pi.addItem(line)
            self._milestone_lines[m] = line
        pi.setXRange(0, 8192)
        pi.setYRange(0, 1)
        self.plot.setToolTip("Measured decode speed (dots, averaged per 256 tokens of context), the ceiling the "
                             "memory bandwidth allows (dashed, computed), and the fitted forecast (dotted).")
        cache_static(pi.legend)
        cache_static(pi.titleLabel)
        # the dots and the two curves change rarely, the depth marker often: moving it repaints a strip across
        # them, which their pixmaps then fill (a thousand dots are not drawn again for it)
        for item in (self.measured, self.ceiling.curve, self.forecast.curve):
            cache_static(item)
        lay.addWidget(self.plot)
        self._keys: dict[str, object] = {}
        self._points_cache: tuple[int, np.ndarray, np.ndarray] = (-1, np.empty(0), np.empty(0))  # (bins version, x, y)

    def reset(self) -> None:
        """A new session or model: draw everything afresh on the next snapshot (the marker's last speed goes)."""
        self._keys.clear()

    def _changed(self, name: str, key: object) -> bool:
        if self._keys.get(name) == key:
            return False
        self._keys[name] = key
        return True

    def _points(self) -> tuple[np.ndarray, np.ndarray]:
        """The bins' (context, tok/s) points, looked up again only when the bins changed."""
        if self._points_cache[0] != self.bins.version:
            self._points_cache = (self.bins.version, *self.bins.points())
        return self._points_cache[1], self._points_cache[2]

    def _y_max(self, s: Snapshot) -> float:
        ys = [y for _x, y in s.ceiling_curve[:1]]
        _x, pts = self._points()
        if pts.size:
            ys.append(float(pts.max()))
        if s.forecast.fit_a_s and s.forecast.fit_points >= MIN_FORECAST_POINTS:
            ys.append(1.0 / s.forecast.fit_a_s)
        ys.extend(v for v in (s.decode_tok_s, s.ceiling_tok_s) if v is not None)
        return max(ys, default=1.0)

    def _marker_y(self, s: Snapshot, y_top: float) -> float | None:
        """The marker's height: the decode speed, moved only when it changed by more than 2 % of the axis (a few
        pixels; it wobbles by a token per second between polls, and each wobble would repaint the plot); while
        idle the last measured speed stays (the ceiling until one was measured)."""
        prev = self._keys.get("here")
        y_prev = prev[1] if isinstance(prev, tuple) and isinstance(prev[1], float) else None
        if s.decode_tok_s is None:
            return y_prev if y_prev is not None else s.ceiling_tok_s
        if y_prev is not None and abs(s.decode_tok_s - y_prev) <= 0.02 * y_top:
            return y_prev
        return float(s.decode_tok_s)

    def update_snapshot(self, s: Snapshot) -> None:
        """Render the depth-related parts of a snapshot."""
        n_ctx = s.model.n_ctx
        x_max = n_ctx or (max(s.context_tokens or 0, 8192))
        if self._changed("range", x_max):
            self.plot.getPlotItem().setXRange(0, x_max, padding=0.02)
            for m, line in self._milestone_lines.items():
                line.setVisible(m <= x_max)
        if self._changed("ceiling", s.ceiling_curve):
            if s.ceiling_curve:
                arr = np.asarray(s.ceiling_curve, dtype=float)
                self.ceiling.setData(arr[:, 0], arr[:, 1])
            else:
                self.ceiling.setData([], [])
        # the y axis first: the keys below are in fractions of it
        y_top = nice_ceiling(self._y_max(s) * 1.05)
        if self._changed("y", y_top):
            self.plot.getPlotItem().setYRange(0, y_top, padding=0)
        fc = s.forecast
        # Keys are rounded to what a pixel can show, so a refit that moves nothing visible repaints nothing.
        fkey = None
        if fc.fit_a_s and fc.fit_b_s_per_token is not None:  # both ends of the curve, to a percent of the axis
            fkey = (round(100 / (fc.fit_a_s * y_top)),
                    round(100 / ((fc.fit_a_s + fc.fit_b_s_per_token * x_max) * y_top)))
        if self._changed("forecast", (fkey, x_max, fc.fit_points >= MIN_FORECAST_POINTS)):
            if (fc.fit_a_s is not None and fc.fit_b_s_per_token is not None and fc.fit_a_s > 0
                    and fc.fit_points >= MIN_FORECAST_POINTS):
                self.forecast.setData(*forecast_curve(fc.fit_a_s, fc.fit_b_s_per_token, x_max))
            else:
                self.forecast.setData([], [])
        x, y = self._points()
        if self._changed("bins", (x.size, self.bins.version // 10)):
            self.measured.setData(x, y)
        here = (None if s.context_tokens is None else round(s.context_tokens * 400 / x_max),  # ~2 px steps
                self._marker_y(s, y_top))
        if self._changed("here", here):
            if s.context_tokens is None:
                self.here.setData([], [])
                self.here_line.hide()
            else:
                if here[1] is None:
                    self.here.setData([], [])
                else:
                    self.here.setData([s.context_tokens], [here[1]])
                self.here_line.setValue(s.context_tokens)
                self.here_line.show()
        enough = fc.fit_points >= MIN_FORECAST_POINTS
        if self._changed("milestones", (fc.milestones, enough)):  # labels formatted only when the forecast moved
            by_ctx = {m.context_tokens: m for m in fc.milestones} if enough else {}
            labels = tuple((m, f"{fmt.ctx_label(m)}\n~{by_ctx[m].tok_s:.0f} tok/s" if m in by_ctx
                            else fmt.ctx_label(m)) for m in self._milestone_lines)
            if self._changed("milestone_labels", labels):
                for m, text in labels:
                    self._milestone_lines[m].label.setFormat(text)
        if self._changed("tip", (fc.milestones, s.forecast.fit_points)):
            lines = ["Measured decode speed (dots, mean per 256 tokens of context), ceiling (dashed, computed from "
                     "bandwidth, weights and KV bytes per token), forecast (dotted, fit of this session: "
                     f"{fc.fit_points} points)."]
            for ms in fc.milestones:
                lo = f" ({fmt.num_tok_s(ms.low_tok_s)}–{fmt.num_tok_s(ms.high_tok_s)})" if ms.low_tok_s else ""
                lines.append(f"at {fmt.ctx_label(ms.context_tokens)}: ~{fmt.tok_s(ms.tok_s)}{lo}, "
                             f"ceiling {fmt.tok_s(ms.ceiling_tok_s)}")
            self.plot.setToolTip("\n".join(lines))
