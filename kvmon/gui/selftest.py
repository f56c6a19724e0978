"""``kvmon --self-test``: build the dashboard offscreen, feed it made-up snapshots, check it painted something."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np
from PySide6 import QtGui


def image_stddev(img: QtGui.QImage) -> float:
    """Standard deviation of the grey levels of an image: ~0 for a blank (single-colour) capture."""
    img = img.convertToFormat(QtGui.QImage.Format.Format_Grayscale8)
    w, h, bpl = img.width(), img.height(), img.bytesPerLine()
    if w == 0 or h == 0:
        return 0.0
    arr = np.frombuffer(img.constBits(), dtype=np.uint8, count=bpl * h).reshape(h, bpl)[:, :w]
    return float(arr.std())


def run(_args: argparse.Namespace | None = None) -> int:
    """Exit 0 when the dashboard renders a non-blank 1280×800 image from synthetic snapshots, 1 otherwise."""
    if "QT_QPA_PLATFORM" not in os.environ and not os.environ.get("DISPLAY") and sys.platform.startswith("linux"):
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    from kvmon.gui.app import ensure_app
    from kvmon.gui.main_window import MainWindow
    from kvmon.gui.settings import Settings
    from kvmon.gui.synthetic import SyntheticMonitor

    app = ensure_app(["kvmon"])
    with tempfile.TemporaryDirectory() as tmp:
        win = MainWindow(Settings(os.path.join(tmp, "selftest.ini")), banner="Self-test", tray=False)
        win.resize(1280, 800)
        win.show()
        mon = SyntheticMonitor()
        for _ in range(30):
            win.on_snapshot(mon.poll())
        app.processEvents()
        sd = image_stddev(win.grab().toImage())
        win.close()
    if sd < 5.0:
        print(f"kvmon self-test: FAILED (blank render, grey stddev {sd:.1f})", file=sys.stderr)
        return 1
    print(f"kvmon self-test: ok (rendered {win.render_count} snapshots, grey stddev {sd:.1f})")
    return 0
