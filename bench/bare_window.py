"""A reference for the dashboard's CPU: a bare PySide6 + pyqtgraph window that shows what a poll changes, read from
nowhere.

Once a second it sets four rich-text QLabels (the header's live figures) and appends a point to two pyqtgraph
curves of 300 points (speed over time, speed against context), at 1280×800: what any Qt dashboard of this kind
repaints per poll, without reading a server, analysing or formatting anything. ``bench/side_by_side.py`` measures
it beside kvmon's dashboard in the same way; run alone it prints its own CPU over ``--seconds`` after ``--warmup``.

    python bench/bare_window.py [--seconds 45] [--warmup 15]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Sequence

LABELS = 4
CURVES = 2
POINTS = 300


def build() -> tuple[object, object]:
    """The window and its 1 Hz timer (started)."""
    import pyqtgraph as pg
    from PySide6 import QtCore, QtWidgets

    w = QtWidgets.QWidget()
    lay = QtWidgets.QGridLayout(w)
    labels = [QtWidgets.QLabel() for _ in range(LABELS)]
    for i, label in enumerate(labels):
        lay.addWidget(label, 0, i)
    curves = []
    for i in range(CURVES):
        plot = pg.PlotWidget()
        plot.setXRange(0, POINTS)
        plot.setYRange(0, 100)
        curves.append(plot.plot([], []))
        lay.addWidget(plot, 1, 2 * i, 1, 2)
    xs: list[float] = []
    ys: list[float] = []

    def tick() -> None:
        n = len(xs)
        value = 50.0 + 20.0 * math.sin(n / 10.0)
        for i, label in enumerate(labels):
            label.setText(f"figure {i} <b>{value + i:.1f}</b> tok/s")
        xs.append(float(n % POINTS))
        ys.append(value)
        for c in curves:
            c.setData(xs[-POINTS:], ys[-POINTS:])

    timer = QtCore.QTimer(w)
    timer.timeout.connect(tick)
    timer.start(1000)
    w.resize(1280, 800)
    w.show()
    return w, timer


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=45.0,
                    help="print the CPU over this window, then quit (0: run until stopped)")
    ap.add_argument("--warmup", type=float, default=15.0)
    args = ap.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6 import QtCore, QtWidgets

    app = QtWidgets.QApplication(sys.argv[:1])
    _keep = build()
    if args.seconds > 0:
        start: list[float] = []

        def begin() -> None:
            start[:] = [time.process_time(), time.monotonic()]
            QtCore.QTimer.singleShot(int(args.seconds * 1000), finish)

        def finish() -> None:
            cpu, wall = time.process_time() - start[0], time.monotonic() - start[1]
            print(f"bare PySide6 + pyqtgraph window: {cpu / wall * 60:.3f} CPU-s/min "
                  f"({LABELS} labels and {CURVES} curves set once a second)")
            app.quit()

        QtCore.QTimer.singleShot(int(args.warmup * 1000), begin)
    app.exec()
    return 0


if __name__ == "__main__":
    sys.exit(main())
