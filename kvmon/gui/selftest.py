"""``kvmon --self-test``: open the dashboard offscreen on the simulator, let it poll, render it, check it is not blank.

It proves an installed or bundled kvmon is whole: Qt and its platform plugin load, resources are found, the
simulator serves real HTTP on 127.0.0.1, the poller thread reaches it and the panels paint. Prints the PNG path
and one verdict line; exits 0 when everything holds, 1 otherwise (saying which step failed and why).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Poll interval during the self-test: several polls within a second or two.
POLL_INTERVAL_S = 0.25
#: Simulated seconds per real second, so the simulated chat has made progress by the time we render.
SIM_SPEED = 20.0
#: The self-test waits for this many successful polls of the simulator before it renders ...
MIN_POLLS = 3
#: ... but gives up after this many wall seconds (a bundle's first start on a busy machine takes a few).
POLL_TIMEOUT_S = 30.0
#: A rendered window is "not blank" when its grey levels vary at least this much (0..255 scale) ...
MIN_GREY_SD = 5.0
#: ... and at least this fraction of pixels differ from the most common colour.
MIN_NON_BACKGROUND_FRACTION = 0.02
#: The modules the self-test drives; a bundle missing one of them is broken.
REQUIRED_MODULES = ("kvmon.gui.app", "kvmon.gui.main_window", "kvmon.gui.settings", "kvmon.sim.server",
                    "kvmon.app.demo", "kvmon.app.monitor", "kvmon.sources.detect", "kvmon.sources.nvml",
                    "kvmon.app.keystore", "keyring", "h11")


class SelfTestError(RuntimeError):
    """A step of the self-test failed; the message says which and why."""


@dataclass(frozen=True)
class ImageStats:
    """How much a rendered image varies: enough to tell a painted dashboard from an empty window."""

    width: int
    height: int
    grey_sd: float
    non_background_fraction: float
    distinct_colours: int

    @property
    def blank(self) -> bool:
        """True when the image is empty or (nearly) one flat colour."""
        return (self.width == 0 or self.height == 0 or self.grey_sd < MIN_GREY_SD
                or self.non_background_fraction < MIN_NON_BACKGROUND_FRACTION)


def image_stats(image: Any) -> ImageStats:
    """Pixel statistics of a QImage (any format), computed with numpy."""
    import numpy as np
    from PySide6.QtGui import QImage

    if image.isNull() or image.width() == 0 or image.height() == 0:
        return ImageStats(0, 0, 0.0, 0.0, 0)
    img = image.convertToFormat(QImage.Format.Format_RGB32)
    w, h = img.width(), img.height()
    raw = np.frombuffer(img.constBits(), dtype=np.uint8, count=img.bytesPerLine() * h)
    pixels = raw.reshape(h, img.bytesPerLine())[:, : w * 4].reshape(h, w, 4)[:, :, :3].astype(np.uint32)
    grey = pixels[:, :, 0] * 0.114 + pixels[:, :, 1] * 0.587 + pixels[:, :, 2] * 0.299  # B, G, R
    packed = (pixels[:, :, 0] << 16 | pixels[:, :, 1] << 8 | pixels[:, :, 2]).ravel()
    values, counts = np.unique(packed, return_counts=True)
    return ImageStats(w, h, float(grey.std()), 1.0 - float(counts.max()) / packed.size, int(values.size))


def _ensure_platform() -> str:
    """Use Qt's offscreen platform unless a display is there (or QT_QPA_PLATFORM was chosen)."""
    if not os.environ.get("QT_QPA_PLATFORM") and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    ):
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    return os.environ.get("QT_QPA_PLATFORM") or "default"


def _import_required() -> dict[str, Any]:
    """Import what the self-test drives; a missing module is reported by name."""
    modules: dict[str, Any] = {}
    for name in REQUIRED_MODULES:
        try:
            modules[name] = importlib.import_module(name)
        except ImportError as exc:
            raise SelfTestError(f"module {name} is missing or broken: {exc}") from exc
    return modules


def _pump(app: Any, seconds: float) -> None:
    """Run the Qt event loop for ``seconds`` of wall time."""
    deadline = time.monotonic() + seconds
    while True:
        app.processEvents()
        if time.monotonic() >= deadline:
            return
        time.sleep(0.01)


def _render(window: Any, out_path: Path) -> ImageStats:
    """Grab the window into a PNG at ``out_path`` and return its pixel statistics."""
    image = window.grab().toImage()
    if not image.save(str(out_path), "PNG"):
        raise SelfTestError(f"could not write {out_path}")
    return image_stats(image)


def self_test(out_path: Path, *, scenario: str = "seed-3090x2", min_polls: int = MIN_POLLS,
              timeout_s: float = POLL_TIMEOUT_S) -> ImageStats:
    """The whole check; returns the rendered image's stats or raises SelfTestError saying what failed."""
    platform = _ensure_platform()
    from kvmon.gui.qtplatform import startup_problem

    problem = startup_problem()
    if problem is not None:  # Qt would abort on loading its platform plugin: say what is missing instead
        raise SelfTestError(problem.message.removeprefix("kvmon: "))
    modules = _import_required()
    from PySide6.QtGui import QIcon

    from kvmon.core.snapshot import ConnectionStatus
    from kvmon.resources import icon_path

    gui_app = modules["kvmon.gui.app"]
    app = gui_app.ensure_app(["kvmon"])
    icon_file = icon_path()
    if icon_file is None:
        raise SelfTestError("kvmon/resources/icons/kvmon.svg is not in this installation (the package was built "
                            "without its data files)")
    icon = QIcon(str(icon_file))
    if icon.isNull() or icon.pixmap(64, 64).isNull():
        raise SelfTestError(f"the app icon {icon_file} does not load (Qt's SVG icon engine missing?)")

    snapshots: list[Any] = []

    def connected() -> int:
        return sum(1 for s in snapshots if s.connection.status == ConnectionStatus.CONNECTED)

    with tempfile.TemporaryDirectory(prefix="kvmon-self-test-") as tmp:
        # Settings in a throw-away file: the self-test never reads or changes the user's settings.
        settings = modules["kvmon.gui.settings"].Settings(str(Path(tmp) / "settings.ini"))
        try:
            session = modules["kvmon.app.demo"].demo_session(scenario, f"Self-test: simulated {scenario}",
                                                            speed=SIM_SPEED)
        except Exception as exc:
            raise SelfTestError(f"the simulator did not start: {type(exc).__name__}: {exc}") from exc
        poller = window = None
        try:
            window, poller = gui_app.build_window(session, settings, POLL_INTERVAL_S, tray=False)
            poller.snapshot.connect(snapshots.append)
            window.setWindowIcon(icon)
            window.resize(1280, 800)
            window.show()
            poller.start()
            deadline = time.monotonic() + timeout_s
            while connected() < min_polls and time.monotonic() < deadline:
                _pump(app, 0.05)
            if connected() < min_polls:
                last = snapshots[-1].connection if snapshots else None
                why = f"last status {last.status.value}: {last.reason}" if last is not None else "no poll came back"
                raise SelfTestError(
                    f"only {connected()} of {min_polls} polls of the simulator succeeded in {timeout_s:.0f} s ({why})"
                )
            _pump(app, 0.3)  # let the window paint the last snapshot
            stats = _render(window, out_path)
        finally:
            if poller is not None:
                poller.stop()
            if window is not None:
                window.close()
                _pump(app, 0.05)
            session.close()
    if stats.blank:
        raise SelfTestError(
            f"the rendered dashboard is blank on platform {platform!r} (grey sd {stats.grey_sd:.1f}, "
            f"{stats.non_background_fraction:.1%} non-background pixels)"
        )
    return stats


def default_output() -> Path:
    """A fresh PNG path in the temporary directory."""
    fd, name = tempfile.mkstemp(prefix="kvmon-self-test-", suffix=".png")
    os.close(fd)
    return Path(name)


def run(args: argparse.Namespace | None = None) -> int:
    """Entry point of ``kvmon --self-test``: prints the PNG path and a one-line verdict, returns 0 or 1."""
    out_path = Path(getattr(args, "self_test_output", None) or default_output())
    started = time.monotonic()
    try:
        stats = self_test(out_path)
    except SelfTestError as exc:
        print(f"kvmon self-test: FAIL: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # anything else is a broken install too: say what, don't crash
        if sys.stderr is not None:  # None in a windowed (no console) bundle
            traceback.print_exc()
        print(f"kvmon self-test: FAIL: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(out_path)
    print(
        f"kvmon self-test: OK: dashboard rendered {stats.width}x{stats.height} from the simulator over HTTP "
        f"(grey sd {stats.grey_sd:.1f}, {stats.distinct_colours} colours) in {time.monotonic() - started:.1f} s"
    )
    return 0
