"""The atlas's points on the speed-vs-context plot: this session's sweep with a marker of its own (decode's colour,
diamonds), the points measured before this session on the same configuration faded and hollow, each in the legend
only while there are some. What they are is the Snapshot's ``atlas`` (``kvmon.core.curve_config.AtlasView``)."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg

from kvmon.core.curve_config import AtlasView
from kvmon.gui import theme

SWEEP_NAME = "sweep"
EARLIER_NAME = "measured before (same setup)"
EARLIER_ALPHA = 150


class AtlasDots:
    """Two scatters on one plot item: the sweep's points and the earlier ones."""

    def __init__(self, pi: pg.PlotItem, scatter: type[pg.ScatterPlotItem] = pg.ScatterPlotItem) -> None:
        self._pi = pi
        self.earlier = scatter(size=6, pen=None, brush=theme.brush("muted", EARLIER_ALPHA), symbol="s")
        self.sweep = scatter(size=9, pen=pg.mkPen(theme.background(), width=1), brush=theme.brush("decode"),
                             symbol="d")
        self.sweep.setZValue(4)
        pi.addItem(self.earlier)
        pi.addItem(self.sweep)
        self._key: object = None
        self._in_legend = {SWEEP_NAME: False, EARLIER_NAME: False}

    def update(self, view: AtlasView | None) -> bool:
        """Draw ``view``'s points; whether anything drawn changed."""
        points = view.points if view is not None else ()
        key = tuple((p.context_tokens, p.decode_tok_s, p.kind) for p in points)
        if key == self._key:
            return False
        self._key = key
        for item, name, kind in ((self.sweep, SWEEP_NAME, "sweep"), (self.earlier, EARLIER_NAME, "earlier")):
            pts = np.asarray([(p.context_tokens, p.decode_tok_s) for p in points if p.kind == kind],
                             dtype=float).reshape(-1, 2)
            item.setData(pts[:, 0], pts[:, 1])
            shown = bool(len(pts))
            if shown != self._in_legend[name]:
                legend = self._pi.legend
                if shown:
                    legend.addItem(item, name)
                else:
                    legend.removeItem(item)
                self._in_legend[name] = shown
        return True

    def y_max(self) -> float | None:
        """The highest speed drawn (the axis keeps them in view: they are this configuration's)."""
        ys = [float(np.max(y)) for item in (self.sweep, self.earlier)
              for _x, y in [item.getData()] if y is not None and len(y)]
        return max(ys) if ys else None

    def items(self) -> tuple[pg.ScatterPlotItem, pg.ScatterPlotItem]:
        return self.sweep, self.earlier
