"""``kvmon --self-test``: the blank-image check, the platform choice, each failure's message, and a real passing
run from source (the simulator over HTTP on 127.0.0.1, the dashboard offscreen)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from repo_paths import ROOT

from kvmon.gui import selftest

# --- the blank check ------------------------------------------------------------------------------------


def test_flat_image_is_blank(qapp: object) -> None:
    from PySide6.QtGui import QColor, QImage

    img = QImage(320, 200, QImage.Format.Format_ARGB32)
    img.fill(QColor("#f0f0f0"))
    stats = selftest.image_stats(img)
    assert (stats.width, stats.height, stats.distinct_colours) == (320, 200, 1)
    assert stats.grey_sd == 0.0 and stats.non_background_fraction == 0.0
    assert stats.blank


def test_drawn_image_is_not_blank(qapp: object) -> None:
    from PySide6.QtCore import QRect, Qt
    from PySide6.QtGui import QColor, QImage, QPainter, QPen

    img = QImage(320, 200, QImage.Format.Format_RGB32)
    img.fill(QColor("white"))
    p = QPainter(img)
    p.fillRect(QRect(0, 0, 320, 30), QColor("#1f3a5f"))
    p.setPen(QPen(QColor("#e5534b"), 3))
    for x in range(0, 320, 16):
        p.drawLine(x, 40, x + 10, 190)
    p.fillRect(QRect(20, 150, 200, 20), Qt.GlobalColor.darkGreen)
    p.end()
    stats = selftest.image_stats(img)
    assert not stats.blank
    assert stats.grey_sd > selftest.MIN_GREY_SD and stats.distinct_colours > 3


def test_a_few_stray_pixels_are_still_blank(qapp: object) -> None:
    from PySide6.QtGui import QColor, QImage

    img = QImage(400, 300, QImage.Format.Format_RGB32)
    img.fill(QColor("black"))
    for x in range(0, 400, 40):
        img.setPixelColor(x, 10, QColor("white"))
    stats = selftest.image_stats(img)
    assert stats.blank and 0 < stats.non_background_fraction < selftest.MIN_NON_BACKGROUND_FRACTION


def test_null_image_is_blank(qapp: object) -> None:
    from PySide6.QtGui import QImage

    stats = selftest.image_stats(QImage())
    assert stats.blank and stats.width == 0


# --- platform choice --------------------------------------------------------------------------------------


def test_offscreen_when_no_display(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("QT_QPA_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY"):
        monkeypatch.delenv(var, raising=False)
    assert selftest._ensure_platform() == "offscreen"
    assert os.environ["QT_QPA_PLATFORM"] == "offscreen"


def test_display_or_chosen_platform_is_respected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QT_QPA_PLATFORM", raising=False)
    monkeypatch.setenv("DISPLAY", ":99")
    assert selftest._ensure_platform() == "default"
    assert "QT_QPA_PLATFORM" not in os.environ
    monkeypatch.setenv("QT_QPA_PLATFORM", "minimal")
    assert selftest._ensure_platform() == "minimal"


# --- failures say what failed ---------------------------------------------------------------------------


def test_missing_module_fails_by_name(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                      tmp_path: Path) -> None:
    monkeypatch.setattr(selftest, "REQUIRED_MODULES", ("kvmon.gui.app", "kvmon.no_such_module"))
    assert selftest.run(_args(tmp_path)) == 1
    err = capsys.readouterr().err
    assert "FAIL" in err and "kvmon.no_such_module" in err


def test_unknown_scenario_fails_clearly(qapp: object, tmp_path: Path) -> None:
    with pytest.raises(selftest.SelfTestError, match="simulator did not start"):
        selftest.self_test(tmp_path / "x.png", scenario="no-such-scenario")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_server_fails_with_the_reason(qapp: object, monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    """A session whose server refuses connections: the verdict names the status, after the timeout."""
    import kvmon.app.demo as demo_mod
    import kvmon.app.servers as servers_mod

    url = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setattr(demo_mod, "demo_session", lambda *a, **k: servers_mod.server_session(
        url, api_key=None, timeout_s=0.5, log_path=None))
    # On a very busy machine the first poll may not be back yet; when it is, the reason is the refusal.
    with pytest.raises(selftest.SelfTestError,
                       match=r"only 0 of 3 polls .* \((last status unreachable: .+|no poll came back)\)$"):
        selftest.self_test(tmp_path / "x.png", timeout_s=4.0)
    assert not (tmp_path / "x.png").exists()


def test_unwritable_output_fails(qapp: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "no-such-dir" / "shot.png"
    assert selftest.run(_args(out)) == 1
    assert f"could not write {out}" in capsys.readouterr().err


def _args(out: Path) -> object:
    import argparse

    return argparse.Namespace(self_test_output=str(out) if out.suffix == ".png" else str(out / "x.png"))


# --- the real thing ---------------------------------------------------------------------------------------


# Run in a fresh process with every module the PyInstaller spec excludes made unimportable, so that a
# needed module excluded from the bundle fails here, not first in the built .deb.
_BLOCKED_RUN = """
import runpy, sys
from importlib.abc import MetaPathFinder
BLOCK = set(sys.argv[1].split(","))
class Excluded(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name in BLOCK or any(name.startswith(b + ".") for b in BLOCK):
            raise ImportError(f"{name} is excluded from the bundle")
        return None
sys.meta_path.insert(0, Excluded())
sys.argv = ["kvmon", "--self-test"]
runpy.run_module("kvmon", run_name="__main__")
"""


def _spec_excludes() -> list[str]:
    import ast

    tree = ast.parse((ROOT / "packaging" / "pyinstaller" / "kvmon.spec").read_text())
    found: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in ("QT_EXCLUDES", "PY_EXCLUDES"):
                found[node.targets[0].id] = ast.literal_eval(node.value)
    assert set(found) == {"QT_EXCLUDES", "PY_EXCLUDES"}
    return found["QT_EXCLUDES"] + found["PY_EXCLUDES"]


def test_self_test_passes_from_source_without_the_excluded_modules(tmp_path: Path) -> None:
    """The self-test in a fresh process: simulator, poller, window, PNG, exit 0, using only bundled modules."""
    blocked = [m for m in _spec_excludes() if m not in ("pytest", "_pytest")]  # pytest itself runs this test
    assert "PySide6.QtWebEngineCore" in blocked
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "KVMON_RESOURCES")}
    env.update(QT_QPA_PLATFORM="offscreen", HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "config"),
               TMPDIR=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", _BLOCKED_RUN, ",".join(blocked)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    png, verdict = proc.stdout.strip().splitlines()[-2:]
    assert Path(png).is_file() and Path(png).parent == tmp_path
    assert verdict.startswith("kvmon self-test: OK: dashboard rendered 1280x800")
    assert not (tmp_path / "config" / "kvmon").exists(), "the self-test must not write the user's settings"
