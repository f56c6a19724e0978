"""Speed vs context depth, the hero: measured points, ceiling curve, the forecast with its 80% band, milestones,
where the current regime began, where the forecast stops (kernels that change with depth), you-are-here.

Everything drawn comes from the Snapshot (the forecast curve is the analysis's, ``Forecast.curve``) and from the
session store's bins: the current regime's points in the decode colour, the earlier regimes' points of the same
model faded (the fit ignores them).
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from kvmon.core.points import ContextBins
from kvmon.core.snapshot import MILESTONES, Forecast, Snapshot  # a line at each depth the forecast gives
from kvmon.gui import fmt, theme
from kvmon.gui.panels.here_marker import HereMarker
from kvmon.gui.widgets import TokenAxis, add_curve, cache_static, legend_below, make_plot, nice_ceiling

REGIME_WORDS = {"n_ctx": "new n_ctx", "cache_types": "new cache types", "slots": "new slot count",
                "devices": "new devices", "placement": "new placement", "reload": "reloaded"}
BAND_ALPHA = 45
REDRAW_FRACTION = 0.0025  # of the y axis: about a pixel of a 400-pixel plot
BAND_EDGE_ALPHA = 110
EARLIER_ALPHA = 90
ONE_TOKEN_NAME = "ceiling without speculation"
ONE_TOKEN_ALPHA = 120
EARLIER_NAME = "before this regime"


def regime_label(cause: str | None) -> str | None:
    """The marker's text for a regime that began with ``cause``; None for the first one or another model's."""
    word = REGIME_WORDS.get(cause or "")
    return None if word is None else f"{word}: forecast from here"


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

    def __init__(self, bins: ContextBins, earlier: ContextBins | None = None,
                 parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.bins = bins
        self.earlier_bins = earlier if earlier is not None else ContextBins(bins.bin_tokens)
        lay = QtWidgets.QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        self.plot = make_plot("Speed vs context depth", "context", "tokens", "decode", "tok/s",
                              axis_items={"bottom": TokenAxis(orientation="bottom")})
        pi = self.plot.getPlotItem()
        legend_below(self.plot, 2)
        edge = theme.color("forecast")
        edge.setAlpha(BAND_EDGE_ALPHA)
        self.forecast_low = pi.plot([], [], pen=pg.mkPen(edge, width=1))  # a pen (not None): the fill needs a path
        self.forecast_high = pi.plot([], [], pen=pg.mkPen(edge, width=1))
        band_color = theme.color("forecast")
        band_color.setAlpha(BAND_ALPHA)
        self.band = pg.FillBetweenItem(self.forecast_low, self.forecast_high, brush=pg.mkBrush(band_color))
        pi.addItem(self.band)
        self.ceiling = add_curve(self.plot, "ceiling", "ceiling (memory bus)", width=2.0)
        one_pen = theme.pen("ceiling", 1.0)
        faint = one_pen.color()
        faint.setAlpha(ONE_TOKEN_ALPHA)
        one_pen.setColor(faint)
        # with speculative decoding the ceiling above is lifted by the tokens per step; this is the one-token one
        self.one_token = pi.plot([], [], pen=one_pen, connect="finite")
        self._one_token_in_legend = False
        self.forecast = add_curve(self.plot, "forecast", "forecast (80% band)", width=2.0)
        self.earlier = Dots(size=4, pen=None, brush=theme.brush("muted", EARLIER_ALPHA))
        pi.addItem(self.earlier)  # in the legend only while there are such points
        self.measured = Dots(size=5, pen=None, brush=theme.brush("decode", 200), name="measured")
        pi.addItem(self.measured)
        here_pen = pg.mkPen(theme.color("here"), width=1, style=QtCore.Qt.PenStyle.DotLine)
        self.here = HereMarker(here_pen, pg.mkPen(theme.color("here"), width=2), theme.brush("decode"),
                               QtGui.QColor(theme.foreground()))
        pi.addItem(self.here, ignoreBounds=True)
        vb = pi.getViewBox()
        vb.sigTransformChanged.connect(self._view_changed)
        vb.sigResized.connect(self._view_changed)
        regime_pen = pg.mkPen(theme.color("warning"), width=1, style=QtCore.Qt.PenStyle.DashDotLine)
        self.regime_line = pg.InfiniteLine(angle=90, movable=False, pen=regime_pen, label="",
                                           labelOpts={"position": 0.92, "color": theme.color("warning")})
        self.regime_line.hide()
        pi.addItem(self.regime_line)
        limit_pen = pg.mkPen(theme.color("forecast"), width=1, style=QtCore.Qt.PenStyle.DashDotDotLine)
        self.limit_line = pg.InfiniteLine(angle=90, movable=False, pen=limit_pen, label="",
                                          labelOpts={"position": 0.80, "color": theme.color("forecast")})
        self.limit_line.hide()
        pi.addItem(self.limit_line)
        self._milestone_lines: dict[int, pg.InfiniteLine] = {}
        for i, m in enumerate(sorted(MILESTONES)):
            # labels of neighbouring milestones sit at three heights so that 8K / 16K / 32K never overlap
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
                             "memory bandwidth allows (dashed, computed), and the forecast with its 80% band (dotted).")
        cache_static(pi.legend)
        cache_static(pi.titleLabel)
        # the dots and the curves change rarely, the depth marker often: moving it repaints a strip across them,
        # which their pixmaps then fill (a thousand dots are not drawn again for it)
        for item in (self.measured, self.earlier, self.ceiling.curve, self.forecast.curve, self.band):
            cache_static(item)
        lay.addWidget(self.plot)
        self._keys: dict[str, object] = {}
        self._earlier_in_legend = False
        self._points_cache: tuple[int, np.ndarray, np.ndarray] = (-1, np.empty(0), np.empty(0))  # (bins version, x, y)
        self._earlier_cache: tuple[int, np.ndarray, np.ndarray] = (-1, np.empty(0), np.empty(0))

    def _view_changed(self, vb: pg.ViewBox) -> None:
        """The marker's bounds follow the view's range and size (its shapes are in pixels)."""
        self.here.view_changed(vb.viewRect(), tuple(vb.viewPixelSize()))  # type: ignore[arg-type]

    def reset(self) -> None:
        """A new session or model: draw everything afresh on the next snapshot (the marker's last speed goes)."""
        self._keys.clear()

    def _changed(self, name: str, key: object) -> bool:
        if self._keys.get(name) == key:
            return False
        self._keys[name] = key
        return True

    def _points(self) -> tuple[np.ndarray, np.ndarray]:
        """The current regime's (context, tok/s) points, looked up again only when the bins changed."""
        if self._points_cache[0] != self.bins.version:
            self._points_cache = (self.bins.version, *self.bins.points())
        return self._points_cache[1], self._points_cache[2]

    def _earlier_points(self) -> tuple[np.ndarray, np.ndarray]:
        """The earlier regimes' points of this model."""
        if self._earlier_cache[0] != self.earlier_bins.version:
            self._earlier_cache = (self.earlier_bins.version, *self.earlier_bins.points())
        return self._earlier_cache[1], self._earlier_cache[2]

    def _y_max(self, s: Snapshot) -> float:
        ys = [y for _x, y in s.ceiling_curve[:1]]
        if s.speculative is not None:  # the one-token ceiling, drawn beneath (or alone before the first count)
            ys.extend(y for _x, y in s.speculative.one_token_curve[:1])
        for _x, pts in (self._points(), self._earlier_points()):
            if pts.size:
                ys.append(float(pts.max()))
        if s.forecast.curve:
            ys.append(max(hi for _n, _t, _lo, hi in s.forecast.curve))
        ys.extend(v for v in (s.decode_tok_s, s.ceiling_tok_s) if v is not None)
        return max(ys, default=1.0)

    def _marker_y(self, s: Snapshot, y_top: float) -> float | None:
        """The marker's height: the decode speed, moved only when it changed by more than 2 % of the axis (a few
        pixels; it wobbles by a token per second between polls, and each wobble would repaint the plot); while
        idle the last measured speed stays, and with nothing measured there is no dot (never the ceiling)."""
        prev = self._keys.get("here")
        y_prev = prev[1] if isinstance(prev, tuple) and isinstance(prev[1], float) else None
        if s.decode_tok_s is None:
            if y_prev is not None or s.context_tokens is None:
                return y_prev
            x, y = self._points()  # drawn afresh while idle (a theme switch): the speed measured nearest this depth
            return float(y[int(np.argmin(np.abs(x - s.context_tokens)))]) if x.size else None
        if y_prev is not None and abs(s.decode_tok_s - y_prev) <= 0.02 * y_top:
            return y_prev
        return float(s.decode_tok_s)

    def _draw_one_token(self, s: Snapshot) -> None:
        """While the server speculates: the one-token ceiling beneath the lifted one (or alone, before the first
        reply's counts lift it), in the legend only then."""
        curve = s.speculative.one_token_curve if s.speculative is not None else ()
        if not self._changed("one_token", curve):
            return
        if curve:
            arr = np.asarray(curve, dtype=float)
            self.one_token.setData(arr[:, 0], arr[:, 1])
        else:
            self.one_token.setData([], [])
        shown = bool(curve)
        if shown != self._one_token_in_legend:
            legend = self.plot.getPlotItem().legend
            if shown:
                legend.addItem(self.one_token, ONE_TOKEN_NAME)
            else:
                legend.removeItem(self.one_token)
            self._one_token_in_legend = shown

    def _draw_forecast(self, fc: Forecast, y_top: float) -> None:
        """The forecast curve and its band, drawn again only when some point of them moved by more than about a
        pixel (``REDRAW_FRACTION`` of the axis): a refit that moves nothing visible repaints nothing."""
        arr = np.asarray(fc.curve, dtype=float).reshape(-1, 4)
        drawn = self._keys.get("forecast")
        if isinstance(drawn, tuple) and drawn[0] == y_top and drawn[1].shape == arr.shape and (
                not arr.size or (np.array_equal(drawn[1][:, 0], arr[:, 0])
                                 and float(np.max(np.abs(drawn[1][:, 1:] - arr[:, 1:]))) <= REDRAW_FRACTION * y_top)):
            return
        self._keys["forecast"] = (y_top, arr)
        if arr.size:
            self.forecast.setData(arr[:, 0], arr[:, 1])
            self.forecast_low.setData(arr[:, 0], arr[:, 2])
            self.forecast_high.setData(arr[:, 0], arr[:, 3])
            self.band.show()
        else:
            for item in (self.forecast, self.forecast_low, self.forecast_high):
                item.setData([], [])
            # a fill between two empty curves keeps the path it had: hidden, or the last model's band stays on screen
            self.band.hide()

    def _draw_regime(self, s: Snapshot) -> None:
        r = s.forecast.regime
        label = regime_label(r.cause)
        if not self._changed("regime", (r.index, r.since_context_tokens, label)):
            return
        if label is None or r.since_context_tokens is None:
            self.regime_line.hide()
            return
        self.regime_line.setValue(r.since_context_tokens)
        self.regime_line.show()  # first: a hidden line's label ignores a new text
        self.regime_line.label.setFormat(label)
        self.regime_line.setToolTip(f"A new regime began here ({r.description}): the forecast fits only the points "
                                    "measured since; earlier ones are drawn faded.")

    def _draw_limit(self, fc: Forecast, x_max: int) -> None:
        """Where the forecast stops short of n_ctx (attention kernels that change with depth), and why."""
        limit = fc.valid_to_tokens
        if not self._changed("limit", (limit, x_max, fc.fit_reason)):
            return
        if limit is None or limit >= x_max:
            self.limit_line.hide()
            return
        self.limit_line.setValue(limit)
        self.limit_line.show()  # first: a hidden line's label ignores a new text
        self.limit_line.label.setFormat(f"kernel-dependent\nbeyond {fmt.ctx_label(limit)}")
        self.limit_line.setToolTip(f"No forecast past {fmt.ctx_label(limit)}: {fc.fit_reason or ''}".rstrip(": "))

    def _draw_milestones(self, fc: Forecast, x_max: int) -> None:
        """Each visible milestone's label: its depth and the forecast there, as people read numbers."""
        if not self._changed("milestones", (fc.milestones, x_max)):  # formatted only when the forecast moved
            return
        by_ctx = {m.context_tokens: m for m in fc.milestones}
        labels = tuple((m, f"{fmt.ctx_label(m)}\n~{fmt.tok_s(by_ctx[m].tok_s)}" if m in by_ctx and m <= x_max
                        else fmt.ctx_label(m)) for m in self._milestone_lines)
        if self._changed("milestone_labels", labels):
            for m, text in labels:
                self._milestone_lines[m].label.setFormat(text)

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
        self._draw_one_token(s)
        # the y axis first: the keys below are in fractions of it
        y_top = nice_ceiling(self._y_max(s) * 1.05)
        if self._changed("y", y_top):
            self.plot.getPlotItem().setYRange(0, y_top, padding=0)
        fc = s.forecast
        self._draw_forecast(fc, y_top)
        x, y = self._points()
        if self._changed("bins", (x.size, self.bins.version // 10)):
            self.measured.setData(x, y)
        ex, ey = self._earlier_points()
        if self._changed("earlier", (ex.size, self.earlier_bins.version)):
            self.earlier.setData(ex, ey)
            legend = self.plot.getPlotItem().legend
            if bool(ex.size) != self._earlier_in_legend:
                if ex.size:
                    legend.addItem(self.earlier, EARLIER_NAME)
                else:
                    legend.removeItem(self.earlier)
                self._earlier_in_legend = bool(ex.size)
        self._draw_regime(s)
        here = (None if s.context_tokens is None else round(s.context_tokens * 400 / x_max),  # ~2 px steps
                self._marker_y(s, y_top))
        if self._changed("here", here):
            if s.context_tokens is None:
                self.here.hide()
            else:
                self.here.set(float(s.context_tokens), here[1])
                self.here.show()
        self._draw_milestones(fc, x_max)
        self._draw_limit(fc, x_max)
        spec = fmt.speculation_text(s)
        if self._changed("tip", (fc.milestones, fc.fit_points, fc.fit_form, fc.regime.index, fc.fit_reason, spec)):
            self.plot.setToolTip(self._tooltip(fc) + (f"\n{spec}" if spec else ""))

    @staticmethod
    def _tooltip(fc: Forecast) -> str:
        form = {"ceiling_scaled": "the speed measured so far, slowing with depth as models of this kind do (too few "
                                  "depths yet for a slope of its own)",
                "bandwidth": "bytes read per token at the measured efficiency plus a fixed overhead",
                "bandwidth+attention": "bytes read per token plus attention work growing with depth",
                "context_linear": "a straight line in depth (model shape or bandwidth unknown: no ceiling)"}
        lines = ["Measured decode speed (dots, mean per 256 tokens of context; faded: before this regime), ceiling "
                 "(dashed, computed from bandwidth, weights and KV bytes per token), forecast (dotted, with its 80% "
                 f"band): {form.get(fc.fit_form or '', 'none yet')}, fitted on {fc.fit_points} points of this regime. "
                 "The band widens with the fit's uncertainty, the timing jitter and how slopes drift past the depths "
                 "measured."]
        if fc.fit_reason and fc.fit_form != "context_linear":
            lines.append(fc.fit_reason[0].upper() + fc.fit_reason[1:] + ".")
        for ms in fc.milestones:
            lo = f" ({fmt.num_tok_s(ms.low_tok_s)}–{fmt.num_tok_s(ms.high_tok_s)})" if ms.low_tok_s else ""
            lines.append(f"at {fmt.ctx_label(ms.context_tokens)}: ~{fmt.tok_s(ms.tok_s)}{lo}, "
                         f"ceiling {fmt.tok_s(ms.ceiling_tok_s)}")
        return "\n".join(lines)
