"""``kvmon screenshot`` on a machine with no display: picks the offscreen platform itself, writes a captioned
PNG of the window (1280×800 in all) or of one panel; unknown panels are refused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pytestqt")
pytest.importorskip("kvmon.sim.server")

from PySide6 import QtGui
from repo_paths import ROOT


def _no_display_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def _colours(img: QtGui.QImage) -> int:
    small = img.convertToFormat(QtGui.QImage.Format.Format_RGB32).scaled(160, 100)
    arr = np.frombuffer(small.constBits(), dtype=np.uint32, count=small.width() * small.height())
    return len(np.unique(arr))


def test_screenshot_demo_without_a_display(qtbot, tmp_path: Path) -> None:
    out = tmp_path / "out.png"
    r = subprocess.run([sys.executable, "-m", "kvmon", "screenshot", "--demo", "seed-3090x2", "--after", "5",
                        "-o", str(out)], capture_output=True, text=True, timeout=120, env=_no_display_env(), cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    img = QtGui.QImage(str(out))
    assert not img.isNull() and (img.width(), img.height()) == (1280, 800)
    assert _colours(img) > 30
    # the caption strip at the bottom is not the window's status bar: it differs from the rows above it
    bottom = img.copy(0, img.height() - 12, img.width(), 12)
    assert _colours(bottom) > 2


def test_screenshot_of_one_panel_and_an_unknown_panel(qtbot, tmp_path: Path) -> None:
    out = tmp_path / "panel.png"
    cmd = [sys.executable, "-m", "kvmon", "screenshot", "--demo", "spill-4090", "--after", "2", "-o", str(out)]
    r = subprocess.run([*cmd, "--panel", "replies"], capture_output=True, text=True, timeout=120,
                       env=_no_display_env(), cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    img = QtGui.QImage(str(out))
    assert not img.isNull() and img.width() < 1280 and _colours(img) > 5
    r = subprocess.run([*cmd, "--panel", "nope"], capture_output=True, text=True, timeout=60,
                       env=_no_display_env(), cwd=ROOT)
    assert r.returncode == 2 and "unknown panel" in r.stderr


def _mean_lightness(img: QtGui.QImage) -> float:
    small = img.convertToFormat(QtGui.QImage.Format.Format_Grayscale8).scaled(160, 100)
    return float(np.frombuffer(small.constBits(), dtype=np.uint8, count=small.sizeInBytes()).mean())


def test_screenshot_at_a_size_and_in_a_theme(qtbot, tmp_path: Path) -> None:
    """``--size`` gives the picture's size (caption included) and ``--theme`` its scheme; a bad size is refused."""
    shots = {}
    for scheme in ("dark", "light"):
        out = tmp_path / f"{scheme}.png"
        r = subprocess.run([sys.executable, "-m", "kvmon", "screenshot", "--demo", "cpu-ddr5", "--after", "2",
                            "--size", "1024x640", "--theme", scheme, "-o", str(out)],
                           capture_output=True, text=True, timeout=120, env=_no_display_env(), cwd=ROOT)
        assert r.returncode == 0, r.stderr[-2000:]
        shots[scheme] = QtGui.QImage(str(out))
        assert (shots[scheme].width(), shots[scheme].height()) == (1024, 640)
    assert _mean_lightness(shots["dark"]) < 100 < _mean_lightness(shots["light"])
    r = subprocess.run([sys.executable, "-m", "kvmon", "screenshot", "--demo", "--size", "big", "-o",
                        str(tmp_path / "x.png")], capture_output=True, text=True, timeout=60,
                       env=_no_display_env(), cwd=ROOT)
    assert r.returncode == 2 and "give a size like 1280x800" in r.stderr


HIDPI_SCRIPT = """
import sys
sys.path.insert(0, "tests")  # the stand-in monitor (tests/synthetic.py); the script runs in the checkout
from kvmon.gui.app import ensure_app
app = ensure_app()
from kvmon.gui import export
from kvmon.gui.main_window import MainWindow
from kvmon.gui.settings import Settings
from synthetic import SyntheticMonitor
w = MainWindow(Settings(sys.argv[2]), tray=False)
w.resize(900, 600)
w.show()
m = SyntheticMonitor()
w.load([m.poll() for _ in range(20)])
app.processEvents()
img = export.save_png(w, sys.argv[1], w.last)
print(w.devicePixelRatioF(), w.width(), w.height(), img.width(), img.height())
"""


def test_png_at_the_screens_device_pixel_ratio(tmp_path: Path) -> None:
    env = dict(_no_display_env(), QT_QPA_PLATFORM="offscreen", QT_SCALE_FACTOR="2")
    out = tmp_path / "hidpi.png"
    r = subprocess.run([sys.executable, "-c", HIDPI_SCRIPT, str(out), str(tmp_path / "s.ini")], capture_output=True,
                       text=True, timeout=120, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    dpr, w, h, iw, ih = (float(v) for v in r.stdout.split())
    assert dpr == 2.0 and iw == 2 * w and ih > 2 * h
    img = QtGui.QImage(str(out))
    assert img.width() == iw and img.height() == ih
