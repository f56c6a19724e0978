"""A real window on a real X server (Xvfb): the dashboard maps, paints, and a screen grab is not blank."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from repo_paths import ROOT
from xvfb_server import _start_xvfb

from kvmon.gui.qtplatform import startup_problem

pytestmark = [pytest.mark.xvfb]

WINDOW_SCRIPT = r"""
import sys, time
sys.path.insert(0, "tests")  # the stand-in monitor (tests/synthetic.py); the script runs in the checkout
import numpy as np
from PySide6 import QtCore, QtGui, QtWidgets
from kvmon.gui.app import ensure_app
from kvmon.gui.main_window import MainWindow
from kvmon.gui.settings import Settings
from synthetic import SyntheticMonitor

app = ensure_app(["kvmon"])
assert QtGui.QGuiApplication.platformName() == "xcb", QtGui.QGuiApplication.platformName()
win = MainWindow(Settings(sys.argv[2]), banner="Xvfb test", tray=False)
win.resize(1280, 800)
win.show()
mon = SyntheticMonitor()
deadline = time.monotonic() + 20
while not win.windowHandle().isExposed() and time.monotonic() < deadline:
    app.processEvents(QtCore.QEventLoop.ProcessEventsFlag.AllEvents, 50)
assert win.windowHandle().isExposed(), "the window was never mapped"
for _ in range(40):
    win.on_snapshot(mon.poll())
    app.processEvents()
t_end = time.monotonic() + 1.0
while time.monotonic() < t_end:
    app.processEvents(QtCore.QEventLoop.ProcessEventsFlag.AllEvents, 50)
shot = QtGui.QGuiApplication.primaryScreen().grabWindow(0)
shot.save(sys.argv[1])
img = shot.toImage().convertToFormat(QtGui.QImage.Format.Format_Grayscale8)
arr = np.frombuffer(img.constBits(), dtype=np.uint8, count=img.bytesPerLine() * img.height())
arr = arr.reshape(img.height(), img.bytesPerLine())[:, : img.width()]
print(f"SIZE {img.width()}x{img.height()} STD {arr.std():.2f} DISTINCT {len(np.unique(arr))}")
"""




@pytest.mark.skipif(shutil.which("Xvfb") is None,
                    reason="Xvfb is not installed (CI installs xvfb xauth and the xcb libraries Qt needs)")
def test_real_window_on_xvfb_is_not_blank(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY")}
    env.update(DISPLAY=":0", QT_QPA_PLATFORM="xcb")
    problem = startup_problem(env, check_display=False)  # the xcb plugin's own libraries: Qt would abort without them
    if problem is not None:
        pytest.skip(problem.message)
    xvfb, display = _start_xvfb()
    try:
        env["DISPLAY"] = display
        png = tmp_path / "xvfb.png"
        out = subprocess.run([sys.executable, "-c", WINDOW_SCRIPT, str(png), str(tmp_path / "s.ini")], env=env,
                             capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert out.returncode == 0, out.stderr[-2000:]
        line = next(ln for ln in out.stdout.splitlines() if ln.startswith("SIZE"))
        size, std, distinct = line.split()[1], float(line.split()[3]), int(line.split()[5])
        assert size == "1280x800"
        assert std > 10.0 and distinct > 20, line
        assert png.stat().st_size > 10_000
    finally:
        xvfb.terminate()
        xvfb.wait(timeout=10)
