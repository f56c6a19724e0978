"""Speed vs context depth, the hero: measured points, ceiling curve, the forecast with its 80% band, the forecast at
each milestone depth on its curve point, where the current regime began, where the forecast stops (kernels that
change with depth), you-are-here.

The current regime fills the axes: its ceiling, forecast and points set the y range, while the points of earlier
regimes of the same model (another n_ctx, a reload, a spill) are drawn faded and may run off the top. Where the
regime began, a line says what changed and how the speed moved ("reloaded with 128K: 70 → 7.0 tok/s"). Every text on
the data is placed by ``kvmon.gui.plot_labels.place``: none covers another, a dot, or leaves the view.

Everything drawn comes from the Snapshot (the forecast curve is the analysis's, ``Forecast.curve``) and from the
session store (its bins, and how the speed changed at the regime's start).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from kvmon.core.points import ContextBins, RegimeStep
from kvmon.core.snapshot import Forecast, Snapshot
from kvmon.core.units import fmt_tok_s_approx
from kvmon.core.words import regime_mark
from kvmon.gui import fmt, theme
from kvmon.gui.flow import stack
from kvmon.gui.panels.atlas_dots import AtlasDots
from kvmon.gui.panels.here_marker import DOT_PX, HereMarker
from kvmon.gui.plot_labels import (
    WAITING_TEXT,
    DataLabels,
    Rect,
    dot_rect,
    empty_text,
    plain_legend,
    polyline_points,
    style_axes,
    to_pixels,
)
from kvmon.gui.widgets import TokenAxis, add_curve, cache_static, legend_below, make_plot, nice_ceiling, set_xy

HERE_TEXT = "you are here"
BAND_ALPHA = 45
REDRAW_FRACTION = 0.0025  # of the y axis: about a pixel of a 400-pixel plot
BAND_EDGE_ALPHA = 110
EARLIER_ALPHA = 90
ONE_TOKEN_NAME = "ceiling without speculation"
ONE_TOKEN_ALPHA = 120
EARLIER_NAME = "before this regime"
MILESTONE_DOT_PX = 7.0


def _speed(v: float) -> str:
    """A speed to two significant figures without its unit: "70", "7.0", "0.52"."""
    return fmt_tok_s_approx(v).removeprefix("~").removesuffix(" tok/s")


def regime_label(cause: str | None, n_ctx: int | None = None, step: RegimeStep | None = None) -> str | None:
    """What the plot says where a regime began: what changed and how the speed moved ("reloaded with 128K: 70 → 7.0
    tok/s"); None for the first regime or another model's (nothing to compare)."""
    word = regime_mark(cause)
    if word is None:
        return None
    step = step or RegimeStep()
    if n_ctx is not None and step.before_n_ctx is not None and n_ctx != step.before_n_ctx:
        word = (f"reloaded with {fmt.ctx_label(n_ctx)}" if cause == "reload"
                else f"context {fmt.ctx_label(step.before_n_ctx)} → {fmt.ctx_label(n_ctx)}")
    if step.before_tok_s is not None and step.after_tok_s is not None:
        return f"{word}: {_speed(step.before_tok_s)} → {_speed(step.after_tok_s)} tok/s"
    if step.before_tok_s is not None:
        return f"{word} (was {_speed(step.before_tok_s)} tok/s)"
    return word


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
    """Plot items made once; each refresh sets data only on the items whose inputs changed, and places the labels
    again only when what they name (or the view) changed."""

    def __init__(self, bins: ContextBins, earlier: ContextBins | None = None,
                 parent: QtWidgets.QWidget | None = None, *,
                 step: Callable[[], RegimeStep | None] | None = None) -> None:
        """``step``: how the speed changed when the current regime began (the session store's)."""
        super().__init__(parent)
        self.bins = bins
        self.earlier_bins = earlier if earlier is not None else ContextBins(bins.bin_tokens)
        self._step_of = step or (lambda: None)
        self._milestones: dict[int, str] = {}  # depth → its label, as shown
        self._placed_key: object = None
        self._place_due = False
        self._updating = True  # while a snapshot is drawn (and while the plot is made): labels are placed at its end
        self._keys: dict[str, object] = {}
        self._data_version = 0  # moves whenever a curve or the dots change (what the labels keep clear of)
        self._legend_items: list[object] = []  # the items shown only while they draw something, in the legend now
        self.plot = make_plot("Speed vs context depth", "context", "tokens", "decode", "tok/s",
                              axis_items={"bottom": TokenAxis(orientation="bottom")})
        style_axes(self.plot)
        pi = self.plot.getPlotItem()
        plain_legend(legend_below(self.plot, 2))
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
        self.forecast = add_curve(self.plot, "forecast", "forecast (80% band)", width=2.0)
        self.earlier = Dots(size=4, pen=None, brush=theme.brush("muted", EARLIER_ALPHA))
        pi.addItem(self.earlier)  # in the legend only while there are such points
        self.measured = Dots(size=5, pen=None, brush=theme.brush("decode", 200), name="measured")
        pi.addItem(self.measured)
        self.atlas_dots = AtlasDots(pi, Dots)  # a sweep's points, and this configuration's from before this session
        # the forecast at each milestone depth, as a ring on the forecast curve (its label beside it)
        self.milestone_dots = Dots(size=MILESTONE_DOT_PX, pen=pg.mkPen(theme.color("forecast"), width=1.5),
                                   brush=pg.mkBrush(theme.background()))
        self.milestone_dots.setZValue(5)
        pi.addItem(self.milestone_dots)
        here_pen = pg.mkPen(theme.color("here"), width=1, style=QtCore.Qt.PenStyle.DotLine)
        self.here = HereMarker(here_pen, pg.mkPen(theme.color("here"), width=2), theme.brush("decode"))
        pi.addItem(self.here, ignoreBounds=True)
        vb = pi.getViewBox()
        vb.sigTransformChanged.connect(self._view_changed)
        vb.sigResized.connect(self._view_changed)
        vb.sigResized.connect(self._view_moved)
        vb.sigRangeChanged.connect(self._view_moved)
        line_pen = pg.mkPen(theme.color("muted"), width=1, style=QtCore.Qt.PenStyle.DashDotLine)
        self.regime_line = pg.InfiniteLine(angle=90, movable=False, pen=line_pen)
        self.regime_line.hide()
        pi.addItem(self.regime_line)
        limit_pen = pg.mkPen(theme.color("forecast"), width=1, style=QtCore.Qt.PenStyle.DashDotDotLine)
        self.limit_line = pg.InfiniteLine(angle=90, movable=False, pen=limit_pen)
        self.limit_line.hide()
        pi.addItem(self.limit_line)
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
        stack(self, self.plot)
        # the texts on the data, in the view box's pixels, placed together (``_place_labels``)
        self.labels = DataLabels(vb, QtGui.QColor(theme.foreground()), QtGui.QColor(theme.background()))
        self._show_empty(WAITING_TEXT)
        self._updating = False

    # --- texts on the data ------------------------------------------------------------------------------------
    def label_texts(self) -> dict[str, str]:
        """Every text shown on the data now, by key ("regime", "here", "limit", "ms:8192", "empty")."""
        return self.labels.shown()

    def milestone_labels(self) -> dict[int, str]:
        """The forecast's label at each milestone depth shown ("64K ~4.85 tok/s")."""
        shown = self.labels.shown()
        return {m: shown[f"ms:{m}"] for m in self._milestones if f"ms:{m}" in shown}

    def _show_empty(self, text: str | None) -> None:
        """Say why the plot is empty ("waiting for the server") in its middle, with no numbers on its axes."""
        if not self._changed("empty", text):
            return
        pi = self.plot.getPlotItem()
        for name in ("left", "bottom"):
            pi.getAxis(name).setStyle(showValues=text is None)
        if text is None:
            self.labels.drop("empty")
        else:
            self.labels.set("empty", text, ("center",), color=theme.color("muted"))
        self._place_due = True

    def _soft_points(self, vb: pg.ViewBox) -> np.ndarray:
        """The curves, dots and lines a label should rather not cover, in the view's pixels."""
        parts = [np.empty((0, 2))]
        for item in (self.ceiling, self.forecast, self.one_token):
            x, y = item.getData()
            if x is not None and len(x):
                parts.append(polyline_points(*to_pixels(vb, x, y)))
        for dots in (self.measured, self.earlier, *self.atlas_dots.items()):
            x, y = dots.getData()
            if x is not None and len(x):
                parts.append(np.column_stack(to_pixels(vb, x, y)))
        ys = np.arange(0.0, vb.height(), 4.0)
        for line in (self.here, self.regime_line, self.limit_line):
            if line.isVisible():
                x = line.position()[0] if isinstance(line, HereMarker) else line.value()
                px, _ = to_pixels(vb, np.array([x]), np.array([0.0]))
                parts.append(np.column_stack([np.full(ys.size, px[0]), ys]))
        return np.concatenate(parts)

    def _place_labels(self) -> None:
        """Put every text where it covers no other text, no dot, and stays in the view (see ``plot_labels``)."""
        vb = self.plot.getPlotItem().getViewBox()
        self._place_due = False
        blocked: list[Rect] = []
        hx, hy = self.here.position()
        if self.here.isVisible() and hx is not None and hy is not None:
            px, py = to_pixels(vb, np.array([hx]), np.array([hy]))
            blocked.append(dot_rect(float(px[0]), float(py[0]), DOT_PX + 2))
        mx, my = self.milestone_dots.getData()
        if mx is not None and len(mx):
            px, py = to_pixels(vb, mx, my)
            blocked += [dot_rect(float(a), float(b), MILESTONE_DOT_PX + 2) for a, b in zip(px, py, strict=True)]
        alone = set(self.labels.anchors) <= {"empty"}
        self.labels.place(blocked, np.empty((0, 2)) if alone else self._soft_points(vb))

    def _view_changed(self, vb: pg.ViewBox) -> None:
        """The marker's bounds follow the view's range and size (its shapes are in pixels)."""
        self.here.view_changed(vb.viewRect(), tuple(vb.viewPixelSize()))

    def _view_moved(self, *_args: object) -> None:
        """The view was resized or its range changed: the labels are placed again (at once, or at the end of the
        snapshot being drawn)."""
        self._place_due = True
        if not self._updating:
            self._place_labels()

    # --- data -------------------------------------------------------------------------------------------------
    def reset(self) -> None:
        """A new session or model: draw everything afresh on the next snapshot (the marker's last speed goes)."""
        self._keys.clear()

    def _changed(self, name: str, key: object) -> bool:
        if name in self._keys and self._keys[name] == key:
            return False
        self._keys[name] = key
        return True

    def _in_legend(self, item: object, name: str, shown: bool) -> None:
        """Name ``item`` in the legend while it is ``shown`` (only while such points or curves are drawn)."""
        if shown == (item in self._legend_items):
            return
        legend = self.plot.getPlotItem().legend
        if shown:
            legend.addItem(item, name)
            self._legend_items.append(item)
        else:
            legend.removeItem(item)
            self._legend_items.remove(item)

    def _y_max(self, s: Snapshot) -> float:
        """The top of the current regime: its ceiling, forecast band, points and speeds (never an earlier regime's
        points, which would squash this one under them)."""
        ys = [y for _x, y in s.ceiling_curve[:1]]
        if s.speculative is not None:  # the one-token ceiling, drawn beneath (or alone before the first count)
            ys.extend(y for _x, y in s.speculative.one_token_curve[:1])
        _x, pts = self.bins.points()
        if pts.size:
            ys.append(float(pts.max()))
        if s.forecast.curve:
            ys.append(max(hi for _n, _t, _lo, hi in s.forecast.curve))
        if (swept := self.atlas_dots.y_max()) is not None:
            ys.append(swept)
        ys.extend(v for v in (s.decode_tok_s, s.ceiling_tok_s) if v is not None)
        if not ys:  # nothing of this regime yet (a reload's first polls): the earlier points keep the scale
            _ex, ey = self.earlier_bins.points()
            ys.extend([float(ey.max())] if ey.size else [])
        return max(ys, default=1.0)

    def _marker_y(self, s: Snapshot, y_top: float) -> float | None:
        """The marker's height: the decode speed, moved only when it changed by more than 2 % of the axis (a few
        pixels; it wobbles by a token per second between polls, and each wobble would repaint the plot); while
        idle the last measured speed stays, and with nothing measured there is no dot (never the ceiling, nor a
        speed of the regime before)."""
        prev = self._keys.get("here")
        y_prev = prev[1] if isinstance(prev, tuple) and isinstance(prev[1], float) else None
        if self._changed("here_regime", s.forecast.regime.index):
            y_prev = None  # a speed of the regime before (a reload's first polls): not this one's
        if s.decode_tok_s is None:
            if y_prev is not None or s.context_tokens is None:
                return y_prev
            x, y = self.bins.points()  # drawn afresh while idle (a theme switch): the speed measured nearest this depth
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
        self._data_version += 1
        set_xy(self.one_token, curve)
        self._in_legend(self.one_token, ONE_TOKEN_NAME, bool(curve))

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
        self._data_version += 1
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
        """The line where the current regime began, and the words of the change at its top."""
        r = s.forecast.regime
        label = regime_label(r.cause, s.model.n_ctx, self._step_of())
        if not self._changed("regime", (r.index, r.since_context_tokens, label)):
            return
        if label is None:
            self.regime_line.hide()
            self.labels.drop("regime")
            return
        if r.since_context_tokens is None:  # no point of it yet: the words alone, at the top left
            self.regime_line.hide()
            self.labels.set("regime", label, ("line", 0.0), bold=True)
            return
        self.regime_line.setValue(r.since_context_tokens)
        self.regime_line.show()
        self.regime_line.setToolTip(f"A new regime began here ({r.description}): the forecast fits only the points "
                                    "measured since; earlier ones are drawn faded.")
        self.labels.set("regime", label, ("line", float(r.since_context_tokens)), bold=True)

    def _draw_limit(self, fc: Forecast, x_max: int) -> None:
        """Where the forecast stops short of n_ctx (attention kernels that change with depth), and why."""
        limit = fc.valid_to_tokens
        if not self._changed("limit", (limit, x_max, fc.fit_reason)):
            return
        if limit is None or limit >= x_max:
            self.limit_line.hide()
            self.labels.drop("limit")
            return
        self.limit_line.setValue(limit)
        self.limit_line.show()
        self.limit_line.setToolTip(f"No forecast past {fmt.ctx_label(limit)}: {fc.fit_reason or ''}".rstrip(": "))
        self.labels.set("limit", f"kernel-dependent beyond {fmt.ctx_label(limit)}", ("line", float(limit)),
                   color=theme.color("forecast"))

    def _draw_milestones(self, fc: Forecast, x_max: int, here: float | None) -> None:
        """The forecast at each milestone depth in view: a ring on the curve and "64K ~4.85 tok/s" beside it, the
        depths ahead of the conversation first (they are what the forecast is for)."""
        ms = tuple((m.context_tokens, m.tok_s) for m in fc.milestones if m.context_tokens <= x_max)
        ahead = sorted((m for m in ms if here is None or m[0] >= here), key=lambda m: m[0])
        if not self._changed("milestones", (ms, len(ahead))):
            return
        self._data_version += 1
        for m in self._milestones:
            self.labels.drop(f"ms:{m}")
        behind = sorted((m for m in ms if here is not None and m[0] < here), key=lambda m: -m[0])
        self._milestones = {}
        for depth, tok_s in (*ahead, *behind):  # those behind the conversation only where they cover no curve
            text = f"{fmt.ctx_label(depth)} ~{fmt.tok_s(tok_s)}"
            self._milestones[depth] = text
            self.labels.set(f"ms:{depth}", text, ("point", float(depth), float(tok_s), MILESTONE_DOT_PX / 2, "above"),
                            optional=(depth, tok_s) not in ahead)
        set_xy(self.milestone_dots, ms)

    def update_snapshot(self, s: Snapshot) -> None:
        """Render the depth-related parts of a snapshot."""
        self._updating = True
        try:
            self._update(s)
        finally:
            self._updating = False

    def _update(self, s: Snapshot) -> None:
        n_ctx = s.model.n_ctx
        x_max = n_ctx or (max(s.context_tokens or 0, 8192))
        if self._changed("range", x_max):
            self.plot.getPlotItem().setXRange(0, x_max, padding=0.02)
        if self._changed("ceiling", s.ceiling_curve):
            self._data_version += 1
            set_xy(self.ceiling, s.ceiling_curve)
        self._draw_one_token(s)
        if self.atlas_dots.update(s.atlas):
            self._data_version += 1
        # the y axis first: the keys below are in fractions of it
        y_top = nice_ceiling(self._y_max(s) * 1.05)
        if self._changed("y", y_top):
            self.plot.getPlotItem().setYRange(0, y_top, padding=0)
        fc = s.forecast
        self._draw_forecast(fc, y_top)
        x, y = self.bins.points()
        if self._changed("bins", (x.size, self.bins.version // 10)):
            self._data_version += 1
            self.measured.setData(x, y)
        ex, ey = self.earlier_bins.points()
        if self._changed("earlier", (ex.size, self.earlier_bins.version)):
            self._data_version += 1
            self.earlier.setData(ex, ey)
            self._in_legend(self.earlier, EARLIER_NAME, bool(ex.size))
        self._draw_regime(s)
        here = (None if s.context_tokens is None else round(s.context_tokens * 400 / x_max),  # ~2 px steps
                self._marker_y(s, y_top))
        if self._changed("here", here):
            if s.context_tokens is None:
                self.here.hide()
                self.labels.drop("here")
            else:
                self.here.set(float(s.context_tokens), here[1])
                self.here.show()
                seen = here[1] is not None and 0.0 <= here[1] <= y_top  # (a dot above the axis is not seen)
                anchor = (("point", float(s.context_tokens), here[1], DOT_PX / 2, "right") if seen
                          else ("line_mid", float(s.context_tokens)))
                self.labels.set("here", HERE_TEXT, anchor)
        self._draw_milestones(fc, x_max, None if s.context_tokens is None else float(s.context_tokens))
        self._draw_limit(fc, x_max)
        self._show_empty(empty_text(s, bool(x.size or ex.size or s.ceiling_curve or fc.curve
                                            or self.atlas_dots.y_max() is not None)))
        placed = (self.labels.key(), self._data_version, y_top, x_max)
        if placed != self._placed_key or self._place_due:
            self._placed_key = placed
            self._place_labels()
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
        lines = ["Measured decode speed (dots, mean per 256 tokens of context; faded: before this regime; diamonds: a "
                 "sweep; squares: measured before this session on the same setup), ceiling "
                 "(dashed, computed from bandwidth, weights and KV bytes per token), forecast (dotted, with its 80% "
                 f"band): {form.get(fc.fit_form or '', 'none yet')}, fitted on {fc.fit_points} points (this "
                 "regime's, and this setup's from before and from sweeps). "
                 "The band widens with the fit's uncertainty, the timing jitter and how slopes drift past the depths "
                 "measured."]
        if fc.fit_reason and fc.fit_form != "context_linear":
            lines.append(fc.fit_reason[0].upper() + fc.fit_reason[1:] + ".")
        for ms in fc.milestones:
            lo = f" ({fmt.num_tok_s(ms.low_tok_s)}–{fmt.num_tok_s(ms.high_tok_s)})" if ms.low_tok_s else ""
            lines.append(f"at {fmt.ctx_label(ms.context_tokens)}: ~{fmt.tok_s(ms.tok_s)}{lo}, "
                         f"ceiling {fmt.tok_s(ms.ceiling_tok_s)}")
        return "\n".join(lines)
