"""``kvmon screenshot [URL | --demo S] --after SECONDS -o FILE.png [--panel NAME]``: headless capture of the live
dashboard, with the caption strip (the headline, model, GPU, context, tok/s, ceiling, kvmon version) below it.

A server it cannot read is not pictured: it exits 2 with the one line ``kvmon once`` says (a demo only with
``--demo``). ``--after`` is seconds of the session, as everywhere: simulated seconds with ``--demo`` (at ``--speed``
10, 60 of them pass in 6 real seconds). Picks the offscreen platform itself when there is no display, and says
none of the platform's notes that change nothing in the picture. Polls every 0.25 s when ``--speed`` is above 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

from kvmon.gui import PANEL_ATTRS

# what Qt's headless platforms say of a window that they cannot do, changing nothing in the picture
QUIET = ("This plugin does not support propagateSizeHints()", "This plugin does not support raise()",
         "This plugin does not support grabbing the keyboard", "QFont::setPointSizeF: Point size <= 0")


def quiet_platform_notes() -> None:
    """Say Qt's messages on stderr as before, except the headless platform's notes that change nothing (``QUIET``);
    any other message is said once."""
    from PySide6 import QtCore

    said: set[str] = set()

    def handler(kind: QtCore.QtMsgType, _context: QtCore.QMessageLogContext, message: str) -> None:
        if message.startswith(QUIET) or message in said:
            return
        said.add(message)
        print(message, file=sys.stderr)

    QtCore.qInstallMessageHandler(handler)


def unreadable(args: argparse.Namespace) -> str | None:
    """Why no server can be pictured, in ``kvmon once``'s one line (None: the one asked for answers, or a demo)."""
    if getattr(args, "demo", None):
        return None
    from kvmon.cli.once import first_reading, unread_line

    first = first_reading(args, sys.stderr)
    if first.nothing is not None:
        return first.nothing
    if first.monitor is not None:
        first.monitor.close()
    snap = first.snapshot
    if snap is None or snap.server_read:
        if snap is not None and getattr(args, "url", None) is None:
            args.url = snap.url  # the server found: pictured as read, never a demo in its place
        return None
    return unread_line(snap)


def run(args: argparse.Namespace) -> int:
    """Poll for ``--after`` seconds, then save the window (or one ``--panel``) as PNG; 0 on success."""
    from kvmon.gui.qtplatform import startup_problem

    # a capture needs no display: offscreen when there is none, or when the windowed platform cannot load here
    if "QT_QPA_PLATFORM" not in os.environ and sys.platform.startswith("linux") and startup_problem() is not None:
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    if args.panel is not None and args.panel not in PANEL_ATTRS:
        print(f"kvmon: unknown panel {args.panel!r}; one of {', '.join(PANEL_ATTRS)}", file=sys.stderr)
        return 2
    why = unreadable(args)
    if why is not None:
        print(f"kvmon: {why.splitlines()[0]}", file=sys.stderr)
        return 2
    from PySide6 import QtCore

    from kvmon.app.servers import choose_servers
    from kvmon.gui.app import build_window, ensure_app
    from kvmon.gui.export import ExportError, captioned_image, grab_image, panel_widget, save_png, shown_snapshot
    from kvmon.gui.settings import Settings

    quiet_platform_notes()
    app = ensure_app(["kvmon"])
    api_key = args.api_key or os.environ.get("KVMON_API_KEY")
    try:
        session = choose_servers(args, api_key).first.session  # the one server read above, or the demo
    except Exception as exc:
        print(f"kvmon: {exc}", file=sys.stderr)
        return 2
    scratch = tempfile.TemporaryDirectory(prefix="kvmon-shot-")  # a capture never touches the user's settings
    settings = Settings(os.path.join(scratch.name, "screenshot.ini"))
    settings.scheme = getattr(args, "theme", "system")
    width, height = getattr(args, "size", (1280, 800))
    speed = float(getattr(args, "speed", 1.0) or 1.0) if getattr(args, "demo", None) else 1.0
    win, poller = build_window(session, settings, 1.0 if speed <= 1.0 else 0.25, tray=False)
    win.resize(width, height)
    if args.after < 300:  # a short capture: the session range fills the time axis instead of a sliver
        win.set_window_range("session")
    compact = win.show_compact() if getattr(args, "compact", False) else None  # the small window instead
    if compact is None:
        win.show()
    poller.start()
    # --after is seconds of the session: simulated ones with --demo, which pass at --speed
    QtCore.QTimer.singleShot(int(max(0.0, args.after) / speed * 1000), app.quit)
    error: str | None = None
    try:
        app.exec()
        app.processEvents()
        try:
            with_caption = bool(getattr(args, "caption", True))
            if compact is not None:
                save_png(compact, args.output, lambda: compact.shown, with_caption=with_caption)
            elif args.panel is None and with_caption:  # the whole picture (dashboard and caption) keeps its size
                dash = panel_widget(win, None)
                plain = grab_image(dash)
                full = captioned_image(dash, lambda: shown_snapshot(win))
                extra = round((full.height() - plain.height()) / (full.devicePixelRatio() or 1.0))
                win.resize(width, height - extra + win.height() - dash.height())  # less the caption, plus the menus
                app.processEvents()
            if compact is None:
                save_png(panel_widget(win, args.panel), args.output, lambda: shown_snapshot(win),
                         with_caption=with_caption)
        except ExportError as exc:
            error = str(exc)
    finally:
        poller.stop()
        session.close()
        scratch.cleanup()
    if error:
        print(f"kvmon: {error}", file=sys.stderr)
        return 2
    print(f"kvmon: wrote {args.output}")
    return 0
