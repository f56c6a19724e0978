"""What the dashboard costs while it runs beside a chat: CPU per minute (visible, minimised), RSS, update time,
and time to first paint beside a bare PySide6 window: of the ``kvmon`` command itself (on a URL nobody answers) and
of its window alone.

The simulated server runs in its own process (``kvmon sim``) so that only the dashboard (GUI thread, poller
thread and its sources) is measured; the GPU source is the fake NVML with two GPUs. The history is
preloaded with 24 h of 1 Hz snapshots before measuring.

    python bench/gui_cost.py [--seconds 60] [--interval 1.0]

Budgets (issue 7): ≤ 0.6 CPU-s/min visible, ≤ 0.1 minimised, median update ≤ 5 ms, RSS flat after warm-up;
(issue 28): first paint ≤ 1.3× the bare window, ≤ 60 MiB RSS for the window process after the day (the bare
parts' RSS is printed beside it: the floor under any window built on them).
"""

from __future__ import annotations

import argparse
import compileall
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the GUI stand-in (tests/synthetic.py) for the preloaded day
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

BUDGET_RSS_MIB = 60  # issue 28: the whole window process after a day of history

FIRST_PAINT = r"""
import os, sys, time
from PySide6 import QtCore, QtWidgets
class Probe(QtCore.QObject):
    def eventFilter(self, obj, ev):
        if ev.type() == QtCore.QEvent.Type.Paint:
            print(f"FIRST_PAINT {time.monotonic():.6f}", flush=True)
            os._exit(0)
        return False
probe = Probe()
if sys.argv[1] == "command":  # the kvmon command itself, on a URL nobody answers: the app is its own
    import kvmon.gui.app as gui_app
    make_app = gui_app.ensure_app
    def watched_app(argv):
        app = make_app(argv)
        app.installEventFilter(probe)  # the first paint of any of its widgets
        return app
    gui_app.ensure_app = watched_app
    from kvmon.cli import main
    sys.argv = ["kvmon", sys.argv[3], "--timeout", "1"]
    sys.exit(main())
app = QtWidgets.QApplication(["bench"])
if sys.argv[1] == "bare":
    w = QtWidgets.QWidget()
elif sys.argv[1] == "label":  # the least any window with content touches: a label, one Qt enum
    w = QtWidgets.QWidget()
    QtWidgets.QVBoxLayout(w).addWidget(QtWidgets.QLabel("tok/s", alignment=QtCore.Qt.AlignmentFlag.AlignRight))
else:
    from kvmon.gui import theme
    theme.apply(app)
    from kvmon.gui.main_window import MainWindow
    from kvmon.gui.settings import Settings
    w = MainWindow(Settings(sys.argv[2]), tray=False)
w.installEventFilter(probe)
w.resize(1280, 800)
w.show()
app.exec()
"""


def first_paint_s(kinds: list[str], tmp: str, rounds: int = 5) -> dict[str, float]:
    """Seconds from starting the process to the window's first paint event, per kind (median of ``rounds`` runs,
    the kinds interleaved so that the machine's drift falls on each alike).

    Both ends read the same system-wide monotonic clock: the process's own start time is only known to the
    boot time's whole second, an error as large as the figure. kvmon's modules are compiled to bytecode first, as an
    installed kvmon has them (with PYTHONDONTWRITEBYTECODE set, each start would compile them all again)."""
    compileall.compile_dir(str(ROOT / "kvmon"), quiet=1)
    times: dict[str, list[float]] = {k: [] for k in kinds}
    env = {**os.environ, "XDG_CONFIG_HOME": os.path.join(tmp, "config")}  # the command's settings: not the user's
    with socket.socket() as s:  # a port nobody listens on: the command's server, unanswered
        s.bind(("127.0.0.1", 0))
        nobody = f"http://127.0.0.1:{s.getsockname()[1]}"
    for _ in range(rounds):
        for kind in kinds:
            t0 = time.monotonic()
            out = subprocess.run([sys.executable, "-c", FIRST_PAINT, kind, os.path.join(tmp, "fp.ini"), nobody],
                                 capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
            m = re.search(r"FIRST_PAINT ([0-9.]+)", out.stdout)
            if not m:
                raise RuntimeError(f"first-paint probe failed: {out.stderr[-800:]}")
            times[kind].append(float(m.group(1)) - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def paint_census() -> Any:
    """An application event filter that counts paint events per (widget class, parent class) in ``.counts``."""
    from PySide6 import QtCore

    class PaintCensus(QtCore.QObject):
        def __init__(self) -> None:
            super().__init__()
            self.counts: Counter[str] = Counter()

        def eventFilter(self, obj: QtCore.QObject, ev: QtCore.QEvent) -> bool:
            if ev.type() == QtCore.QEvent.Type.Paint:
                parent = obj.parent()
                self.counts[f"{type(obj).__name__} in {type(parent).__name__ if parent else '-'}"] += 1
            return False

    return PaintCensus()


def start_sim(scenario: str) -> tuple[subprocess.Popen[str], str]:
    """``kvmon sim`` in a child process; returns it and its URL."""
    proc = subprocess.Popen([sys.executable, "-m", "kvmon", "sim", "--scenario", scenario, "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        m = re.search(r"(http://127\.0\.0\.1:\d+)", line)
        if m:
            return proc, m.group(1)
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError(f"the simulator did not start: {proc.stderr.read() if proc.stderr else ''}")


def bare_parts_mib() -> str:
    """RSS of a bare PySide6 window, then with numpy and pyqtgraph imported, each in a fresh process: the floor under
    any dashboard built on them."""
    code = ("import os, psutil; os.environ.setdefault('QT_QPA_PLATFORM', 'offscreen'); "
            "from PySide6 import QtWidgets; app = QtWidgets.QApplication([]); w = QtWidgets.QMainWindow(); "
            "w.resize(1280, 800); w.show(); app.processEvents(); "
            "r = lambda: psutil.Process().memory_info().rss / 2**20; "
            "a = r(); import numpy, pyqtgraph; print(f'bare PySide6 window {a:.0f} MiB, with numpy and pyqtgraph "
            "{r():.0f} MiB')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    return out.stdout.strip() or f"(not measured: {out.stderr.strip()[-200:]})"


def preload_day(win: object, interval_s: float) -> int:
    """24 h of snapshots, one per ``interval_s``, ending now; history and measured points."""
    from synthetic import SyntheticMonitor

    n = int(86_400 / interval_s)
    mon = SyntheticMonitor(tokens_per_poll=3, n_ctx=262144, t0_wall=time.time() - 86_400, poll_dt_s=interval_s,
                           t0_monotonic=time.monotonic() - 86_400)
    win.load(mon.snapshot(i) for i in range(n))  # type: ignore[attr-defined]  # one at a time, as a live day
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="length of each phase (visible, minimised)")
    ap.add_argument("--interval", type=float, default=1.0, help="poll interval")
    ap.add_argument("--scenario", default="seed-3090x2")
    ap.add_argument("--paint-census", action="store_true", help="also count paint events per widget (visible phase)")
    args = ap.parse_args()

    import psutil
    from PySide6 import QtCore

    from kvmon.app.heap import release_freed_memory
    from kvmon.app.session import Session
    from kvmon.gui.app import build_window, ensure_app
    from kvmon.gui.controller import HIDDEN_INTERVAL_S
    from kvmon.gui.settings import Settings
    from kvmon.sim.fake_nvml import FakeGpu, FakeNvml
    from kvmon.sim.permit import allow

    allow("benchmark")  # its fake GPUs stand in for the machine

    tmp = tempfile.mkdtemp(prefix="kvmon-bench-")
    print("kvmon dashboard cost")
    fp = first_paint_s(["bare", "label", "kvmon", "command"], tmp)

    sim, url = start_sim(args.scenario)
    proc = psutil.Process()
    try:
        gpus = [FakeGpu(name="NVIDIA GeForce RTX 3090", memory_used_bytes=14 * 1024**3,
                        processes=[(sim.pid, 13 * 1024**3)]) for _ in range(2)]
        nvml = FakeNvml(gpus)

        poll_cpu_s: list[float] = []

        class TimedMonitor:
            """Wraps the monitor to measure the poller thread's CPU per poll (time.thread_time)."""

            def __init__(self, inner: object) -> None:
                self.inner = inner

            def poll(self) -> object:
                t0 = time.thread_time()
                snap = self.inner.poll()  # type: ignore[attr-defined]
                poll_cpu_s.append(time.thread_time() - t0)
                return snap

            def close(self) -> None:
                self.inner.close()  # type: ignore[attr-defined]

        def factory() -> object:
            from kvmon.app.build import default_host_source
            from kvmon.app.monitor import Monitor
            from kvmon.core.analysis import Analyzer
            from kvmon.sources.detect import open_source
            from kvmon.sources.nvml import NvmlSource

            return TimedMonitor(Monitor(open_source(url, backend="llama-server", timeout_s=3.0), NvmlSource(nvml=nvml),
                                        default_host_source(), Analyzer()))

        app = ensure_app(["kvmon-bench"])
        win, poller = build_window(Session(factory, None, url), Settings(os.path.join(tmp, "b.ini")),
                                   args.interval, tray=False)
        rss_empty = proc.memory_info().rss
        t = time.perf_counter()
        n = preload_day(win, args.interval)
        preload_s = time.perf_counter() - t
        release_freed_memory()
        rss_day = proc.memory_info().rss
        update_ms: list[float] = []
        original = win.on_snapshot
        poller.snapshot.disconnect()  # the window's own connection: each snapshot goes through timed() only, once

        def timed(s: object) -> None:
            t0 = time.perf_counter()
            original(s)
            if win.painting():
                app.processEvents()  # include the repaint this update caused
                update_ms.append((time.perf_counter() - t0) * 1000)

        poller.snapshot.connect(timed)
        win.resize(1280, 800)
        win.show()
        poller.start()

        def run_for(seconds: float) -> None:
            loop = QtCore.QEventLoop()
            QtCore.QTimer.singleShot(int(seconds * 1000), loop.quit)
            loop.exec()

        run_for(10.0)  # warm-up: first polls, caches, fit
        census = paint_census() if args.paint_census else None
        if census is not None:
            app.installEventFilter(census)
        update_ms.clear()
        poll_cpu_s.clear()
        rss_start = proc.memory_info().rss
        cpu0, gui0 = proc.cpu_times(), time.thread_time()
        run_for(args.seconds)
        cpu1, gui1 = proc.cpu_times(), time.thread_time()
        if census is not None:
            app.removeEventFilter(census)
        polls_visible = sum(poll_cpu_s) * 60.0 / args.seconds
        poll_cpu_s.clear()
        visible_cpu = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) * 60.0 / args.seconds
        win.showMinimized()
        run_for(2.0)
        cpu2, gui2 = proc.cpu_times(), time.thread_time()
        run_for(args.seconds)
        cpu3, gui3 = proc.cpu_times(), time.thread_time()
        minimised_cpu = (cpu3.user + cpu3.system - cpu2.user - cpu2.system) * 60.0 / args.seconds
        polls_minimised = sum(poll_cpu_s) * 60.0 / args.seconds
        rss_end = proc.memory_info().rss
        poller.stop()
        ups = sorted(update_ms)
        print(f"  history preloaded        {n:,} snapshots (24 h) in {preload_s:.1f} s")
        per_min = 60.0 / args.seconds
        print(f"  CPU visible              {visible_cpu:.2f} CPU-s/min process (budget 0.6): GUI thread "
              f"{(gui1 - gui0) * per_min:.2f}, polls (sources + analysis) {polls_visible:.2f}")
        print(f"  CPU minimised            {minimised_cpu:.2f} CPU-s/min process (budget 0.1): GUI thread "
              f"{(gui3 - gui2) * per_min:.2f}, polls {polls_minimised:.2f} (polling every "
              f"{max(args.interval, HIDDEN_INTERVAL_S):g} s while hidden)")
        if ups:
            p95 = ups[min(len(ups) - 1, int(len(ups) * 0.95))]
            print(f"  update time              median {statistics.median(ups):.1f} ms, p95 {p95:.1f} ms "
                  f"over {len(ups)} updates   (budget: median 5 ms)")
        mib = 2**20
        print(f"  RSS                      window before the day {rss_empty / mib:.0f} MiB, after the day "
              f"{rss_day / mib:.0f} MiB (the day's history {(rss_day - rss_empty) / mib:+.1f} MiB); shown and polling: "
              f"start {rss_start / mib:.0f} MiB, end {rss_end / mib:.0f} MiB ({(rss_end - rss_start) / mib:+.1f} MiB)")
        print(f"  RSS of bare parts        {bare_parts_mib()}   (budget after the day: ≤ {BUDGET_RSS_MIB} MiB)")
        cmd = fp["command"]
        print(f"  time to first paint      the kvmon command {cmd:.2f} s ({cmd / fp['bare']:.1f}× the "
              f"bare window; budget 1.3×), its window alone {fp['kvmon']:.2f} s ({fp['kvmon'] / fp['bare']:.1f}×), "
              f"bare PySide6 window {fp['bare']:.2f} s, with one aligned label {fp['label']:.2f} s "
              f"({fp['label'] / fp['bare']:.1f}×)")
        print(f"  machine                  {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
        if census is not None:
            print("  paint events in the visible phase (widget class, parent class: count)")
            for name, count in census.counts.most_common(20):
                print(f"    {name:58} {count}")
    finally:
        sim.terminate()
        sim.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
