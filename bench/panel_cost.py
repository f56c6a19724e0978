"""The dashboard's GUI thread on the real llama-server, panel by panel: CPU per update of each panel, of the session
store and of the server tab, and what is left for painting and Qt's own work.

The dashboard runs in this process (offscreen), polling the real llama-server of the tests (xllamacpp, a tiny llama,
generating without pause, as in ``bench/side_by_side.py``) every ``--interval`` seconds; each panel's update is
wrapped to add its thread CPU to the panel's account. Then the window is minimised for as long again: what the GUI
thread costs then (nothing should render).

    python bench/panel_cost.py [--seconds 40] [--interval 1.0]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

BUDGET_UPDATE_MS = 2.0


def _wrap(obj: Any, name: str, sink: list[float]) -> None:
    """Replace ``obj.name`` by a wrapper that appends each call's thread CPU to ``sink``."""
    inner: Callable[..., Any] = getattr(obj, name)

    def timed(*a: Any, **k: Any) -> Any:
        t0 = time.thread_time()
        try:
            return inner(*a, **k)
        finally:
            sink.append(time.thread_time() - t0)

    setattr(obj, name, timed)


def _run_for(app: Any, seconds: float) -> float:
    """Run the event loop for ``seconds``; the GUI thread's CPU seconds meanwhile."""
    from PySide6 import QtCore

    loop = QtCore.QEventLoop()
    QtCore.QTimer.singleShot(int(seconds * 1000), loop.quit)
    t0 = time.thread_time()
    loop.exec()
    return time.thread_time() - t0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=40.0, help="measured window, visible and then minimised")
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--interval", type=float, default=1.0, help="poll interval")
    ap.add_argument("--paint-census", action="store_true", help="also count paint events per widget (visible)")
    args = ap.parse_args(argv)

    from gui_cost import paint_census
    from side_by_side import busy_server

    from kvmon.app.servers import server_session
    from kvmon.gui.app import build_window, ensure_app
    from kvmon.gui.settings import Settings

    with busy_server("kvmon-panels-") as (work, url, _gen):
        app = ensure_app(["kvmon"])
        session = server_session(url, api_key=None, timeout_s=3.0, log_path=None)
        win, poller = build_window(session, Settings(str(work / "s.ini")), args.interval, tray=False)
        try:
            win.resize(1280, 800)
            win.show()
            poller.start()
            _run_for(app, args.warmup)
            costs: dict[str, list[float]] = defaultdict(list)
            for label, obj, name in [
                ("header", win.header, "update_snapshot"), ("models", win.models, "update_snapshot"),
                ("speed vs context", win.speed_context, "update_snapshot"),
                ("speed over time", win.speed_time, "refresh"),
                ("memory", win.memory, "update_snapshot"), ("bandwidth", win.bandwidth, "update_snapshot"),
                ("alerts", win.alerts, "update_snapshot"), ("status", win.status, "update_snapshot"),
                ("status (1 s tick)", win.status, "tick"), ("server tab", win.server_tabs, "paint"),
                ("session store", win.store, "eat"), ("replies", win.latency, "update_snapshot"),
                ("energy", win.energy, "update_snapshot"),
            ]:
                _wrap(obj, name, costs[label])
            renders: list[float] = []
            _wrap(win, "render_panels", renders)
            census = paint_census() if args.paint_census else None
            if census is not None:
                app.installEventFilter(census)
            visible = _run_for(app, args.seconds)
            if census is not None:
                app.removeEventFilter(census)
            win.showMinimized()
            app.processEvents()
            minimised = _run_for(app, args.seconds)
        finally:
            poller.stop()
            win.close()
            session.close()
    per_min = 60.0 / args.seconds
    updates = sum(sum(v) for k, v in costs.items() if k not in ("session store", "server tab", "status (1 s tick)"))
    print(f"kvmon's GUI thread on the real llama-server (generating), 1280×800 offscreen, poll every "
          f"{args.interval:g} s, {args.seconds:.0f} s visible then {args.seconds:.0f} s minimised")
    print(f"  {'part':22s} {'calls':>6s} {'median ms':>10s} {'CPU-s/min':>10s}")
    for label, v in costs.items():
        if v:
            print(f"  {label:22s} {len(v):6d} {statistics.median(v) * 1e3:10.3f} {sum(v) * per_min:10.4f}")
    outside = visible - sum(sum(v) for v in costs.values())
    print(f"  {'painting, Qt, signals':22s} {'':6s} {'':10s} {outside * per_min:10.4f}")
    print(f"  GUI thread visible: {visible * per_min:.3f} CPU-s/min; minimised: {minimised * per_min:.3f} CPU-s/min")
    med = statistics.median(renders) * 1e3 if renders else float("nan")
    print(f"  update (all panels, one snapshot): median {med:.2f} ms over {len(renders)} "
          f"(budget ≤ {BUDGET_UPDATE_MS} ms); panel updates {updates * per_min:.4f} CPU-s/min")
    if census is not None:
        print("  paint events per poll, by widget:")
        for what, n in census.counts.most_common(25):
            print(f"    {n / max(1, len(renders)):6.1f}  {what}")
    print(f"  machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    return 0 if med <= BUDGET_UPDATE_MS else 1


if __name__ == "__main__":
    sys.exit(main())
