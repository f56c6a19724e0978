"""Memory of replaying a day's recording: the window process's RSS with the recording left in its file (what
``kvmon replay`` does) and held in memory, beside a bare dashboard window.

A recording of ``--hours`` at 1 Hz (the GUI's stand-in snapshots, ``tests/synthetic.py``) is written once; each
mode then runs in a fresh process that opens the replay window offscreen at the recording's end (the whole day
loaded into the history) and prints its RSS and peak RSS.

    python bench/replay_memory.py [--hours 24]

Budget (issue 28): replaying a day's recording stays under 150 MiB.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
BUDGET_MIB = 150


def write_day(path: Path, hours: float) -> int:
    from synthetic import SyntheticMonitor

    from kvmon.core.recorder import Recorder

    mon = SyntheticMonitor(t0_wall=1.7e9, poll_dt_s=1.0)
    n = int(hours * 3600)
    with Recorder(path) as rec:
        for i in range(n):
            rec.record(mon.snapshot(i))
    return n


def child(path: str, mode: str) -> int:
    import psutil

    from kvmon.core.recorder import read_recording
    from kvmon.gui.app import ensure_app, open_replay, replay_window
    from kvmon.gui.settings import Settings

    app = ensure_app(sys.argv[:1])
    t0 = time.perf_counter()
    settings = Settings(os.path.join(tempfile.mkdtemp(prefix="kvmon-bench-"), "s.ini"))
    if mode == "bare":
        from kvmon.gui.main_window import MainWindow

        win = MainWindow(settings, banner=None, tray=False)
    elif mode == "file":
        win, _ctl = open_replay(path, settings)
    else:
        rec = read_recording(path)
        win, _ctl = replay_window(rec.snapshots, "Replay", settings)
        del rec
    win.show()
    for _ in range(20):
        app.processEvents()
        time.sleep(0.01)
    rss = psutil.Process().memory_info().rss / 2**20
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{rss:.0f} {peak:.0f} {time.perf_counter() - t0:.1f}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--child", nargs=2, metavar=("FILE", "MODE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(*args.child)
    path = Path(tempfile.mkdtemp(prefix="kvmon-bench-")) / "day.jsonl"
    t = time.perf_counter()
    n = write_day(path, args.hours)
    print(f"kvmon replay memory: {n:,} snapshots ({args.hours:g} h at 1 Hz), {path.stat().st_size / 2**20:.0f} MiB "
          f"recording written in {time.perf_counter() - t:.0f} s")
    over = False
    for mode, what in (("bare", "a dashboard window, nothing loaded"),
                       ("file", "replay, snapshots left in the file (kvmon replay)"),
                       ("memory", "replay, every snapshot held in memory")):
        out = subprocess.run([sys.executable, __file__, "--child", str(path), mode], capture_output=True, text=True,
                             timeout=3600)
        if out.returncode != 0:
            print(f"  {what}: failed: {out.stderr.strip()[-400:]}")
            return 1
        rss, peak, secs = out.stdout.split()[-3:]
        note = ""
        if mode == "file":
            over = float(peak) > BUDGET_MIB
            note = f"   (budget {BUDGET_MIB} MiB: {'OVER' if over else 'within'})"
        print(f"  {what:52s} RSS {rss:>5s} MiB, peak {peak:>5s} MiB, opened in {secs} s{note}")
    path.unlink()
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
