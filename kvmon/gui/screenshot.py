"""``kvmon screenshot [URL | --demo S] --after SECONDS -o FILE.png``: headless capture of the live dashboard."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

PANELS = ("header", "speed-vs-context", "speed-over-time", "memory", "bandwidth", "alerts", "what-if")


def run(args: argparse.Namespace) -> int:
    """Poll for ``--after`` seconds, then save the window (or one ``--panel``) as PNG; 0 on success."""
    if "QT_QPA_PLATFORM" not in os.environ and not os.environ.get("DISPLAY") and sys.platform.startswith("linux"):
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    if args.panel is not None and args.panel not in PANELS:
        print(f"kvmon: unknown panel {args.panel!r}; one of {', '.join(PANELS)}", file=sys.stderr)
        return 2
    from PySide6 import QtCore

    from kvmon.gui.app import build_window, choose_session, ensure_app
    from kvmon.gui.settings import Settings

    app = ensure_app(["kvmon"])
    api_key = args.api_key or os.environ.get("KVMON_API_KEY")
    try:
        session = choose_session(args, api_key)
    except Exception as exc:
        print(f"kvmon: {exc}", file=sys.stderr)
        return 2
    scratch = tempfile.TemporaryDirectory(prefix="kvmon-shot-")  # a capture never touches the user's settings
    settings = Settings(os.path.join(scratch.name, "screenshot.ini"))
    win, poller = build_window(session, settings, 1.0, tray=False)
    win.resize(1280, 800)
    win.show()
    poller.start()
    QtCore.QTimer.singleShot(int(max(0.0, args.after) * 1000), app.quit)
    try:
        app.exec()
        target = {
            None: win, "header": win.header, "speed-vs-context": win.speed_context, "speed-over-time": win.speed_time,
            "memory": win.memory, "bandwidth": win.bandwidth, "alerts": win.alerts,
            "what-if": win.show_whatif() if args.panel == "what-if" else None,
        }[args.panel]
        app.processEvents()
        ok = target.grab().save(args.output)
    finally:
        poller.stop()
        session.close()
        scratch.cleanup()
    if not ok:
        print(f"kvmon: could not write {args.output}", file=sys.stderr)
        return 2
    print(f"kvmon: wrote {args.output}")
    return 0
