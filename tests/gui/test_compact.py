"""The compact view: what it says of a snapshot, switching to it and back, the server it follows, its remembered
place and its own PNG."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from PySide6 import QtCore, QtGui, QtWidgets
from synthetic import SyntheticMonitor

from kvmon.core.history import History
from kvmon.core.snapshot import Activity, Alert, AlertLevel, LastDecode, Verdict, VerdictLevel
from kvmon.gui import theme
from kvmon.gui.compact import BUSIEST, CompactView, compact_words
from kvmon.gui.main_window import MainWindow
from kvmon.gui.settings import Settings


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(str(tmp_path / "s.ini"))


def test_the_words_of_a_decoding_snapshot() -> None:
    s = dataclasses.replace(SyntheticMonitor().snapshot(10),
                            verdict=Verdict(VerdictLevel.WARNING, "VRAM full soon", "VRAM full in ≈ 2 min", "x"),
                            alerts=(Alert(AlertLevel.INFO, "advice", "use `-ctk q8_0`"),
                                    Alert(AlertLevel.WARNING, "vram_full_soon", "VRAM full in ≈ 2 min")))
    w = compact_words(s)
    assert (w.level, w.state) == ("warning", "VRAM full soon")
    assert w.speed == f"{s.decode_tok_s:.1f} tok/s" and not w.speed_dimmed
    assert w.against == f"of {s.ceiling_tok_s:.0f} ceiling"
    assert w.context == "context 5.20K of 32.8K"  # the header's figures: 32,768 reads 32.8K, never 32K
    free = s.gpus[0].vram_free_bytes / 1024**3
    assert w.headroom == f"VRAM {free:.1f} GiB free"
    assert (w.alert_level, w.alert) == ("warning", "VRAM full in ≈ 2 min")  # the most severe one


def test_idle_shows_the_last_speed_dimmed_with_its_age() -> None:
    s = SyntheticMonitor().snapshot(10)
    idle = dataclasses.replace(s, decode_tok_s=None, activity=Activity.IDLE, alerts=(),
                               last_decode=LastDecode(41.3, s.t_monotonic - 90, s.t_wall - 90, 5000))
    w = compact_words(idle)
    assert w.speed == "41.3 tok/s" and w.speed_dimmed and w.against.startswith("≈ 2 min ago")
    assert w.alert == "No alerts" and w.alert_level is None
    fresh = dataclasses.replace(idle, last_decode=LastDecode(41.3, s.t_monotonic - 0.04, s.t_wall, 5000))
    assert compact_words(fresh).against.startswith("just now · ceiling ")  # the header's words, not "0.0 s ago"


def _window(qtbot, settings: Settings) -> MainWindow:  # type: ignore[no-untyped-def]
    win = MainWindow(settings, tray=False)
    qtbot.addWidget(win)
    win.resize(1024, 640)
    win.show()
    qtbot.waitExposed(win)
    return win


def test_ctrl_m_switches_to_the_compact_view_and_a_double_click_back(qtbot, settings: Settings) -> None:
    win = _window(qtbot, settings)
    mon = SyntheticMonitor()
    for _ in range(3):
        win.on_snapshot(mon.poll())
    seen: list[bool] = []
    win.shown_changed.connect(seen.append)
    win.menus.actions["compact"].trigger()
    compact = win.compact
    assert compact is not None and compact.isVisible() and not win.isVisible()
    assert seen and all(seen)  # the pollers keep their pace: the compact view is on screen
    s = mon.poll()
    win.on_snapshot(s)
    assert compact.speed.text() == f"{s.decode_tok_s:.1f} tok/s"
    assert compact.context.text() == "context 2.80K of 32.8K"
    qtbot.mouseDClick(compact, QtCore.Qt.MouseButton.LeftButton)
    assert win.isVisible() and not compact.isVisible()


def test_server_text_is_never_markup(qtbot, settings: Settings) -> None:
    win = _window(qtbot, settings)
    s = SyntheticMonitor().snapshot(5)
    win.on_snapshot(dataclasses.replace(s, alerts=(Alert(AlertLevel.WARNING, "x", "<b>bold</b> &amp; <i>model</i>"),)))
    compact = win.show_compact()
    assert compact.alert.words.whole() == "<b>bold</b> &amp; <i>model</i>"
    assert compact.alert.words.textFormat() == QtCore.Qt.TextFormat.PlainText


def test_an_alert_is_marked_by_its_shape_as_in_the_window(qtbot, settings: Settings) -> None:
    """▲ a warning, ■ a critical alert, ● none: the level reads without its colour, as in the alerts panel."""
    win = _window(qtbot, settings)
    s = SyntheticMonitor().snapshot(5)
    compact = win.show_compact()
    for level, shape in ((AlertLevel.WARNING, "▲"), (AlertLevel.CRITICAL, "■")):
        win.on_snapshot(dataclasses.replace(s, alerts=(Alert(level, "x", "VRAM full on GPU 0"),)))
        assert compact.alert.text() == f"{shape} VRAM full on GPU 0"
    win.on_snapshot(dataclasses.replace(s, alerts=()))
    assert compact.alert.text() == "● No alerts"


def test_it_follows_the_busiest_server_or_the_one_chosen(qtbot, settings: Settings) -> None:
    win = _window(qtbot, settings)
    win.add_server("b", "server b")
    slow, fast = SyntheticMonitor(tokens_per_poll=30000), SyntheticMonitor()  # deep context: slower decode
    win.on_server_snapshot("main", slow.poll())
    b = fast.poll()
    win.on_server_snapshot("b", b)
    compact = win.show_compact()
    assert compact.speed.text() == f"{b.decode_tok_s:.1f} tok/s" and compact.server.text() == "server b"
    compact.set_follow("main")
    a = slow.poll()
    win.on_server_snapshot("main", a)
    assert compact.speed.text() == f"{a.decode_tok_s:.1f} tok/s"
    compact.set_follow(BUSIEST)
    assert compact.server.text() == "server b"


def test_its_place_size_and_on_top_are_remembered(qtbot, settings: Settings) -> None:
    first = CompactView(settings)
    qtbot.addWidget(first)
    first.show()
    qtbot.waitExposed(first)
    first.resize(420, 170)
    first.set_on_top(True)
    first.hide()
    again = CompactView(settings)
    qtbot.addWidget(again)
    assert (again.width(), again.height()) == (420, 170)
    assert again.on_top_action.isChecked() and again.windowFlags() & QtCore.Qt.WindowType.WindowStaysOnTopHint


def test_the_sparkline_draws_decode_under_the_ceiling_with_gaps_as_gaps(qtbot, settings: Settings) -> None:
    mon = SyntheticMonitor()
    history = History()
    for seq in range(1, 61):
        s = mon.snapshot(seq)
        if 25 <= seq <= 35:  # ten seconds without a speed: nothing decoded
            s = dataclasses.replace(s, decode_tok_s=None)
        history.append(s)
    compact = CompactView(settings)
    qtbot.addWidget(compact)
    compact.resize(380, 150)
    compact.show()
    compact.update_snapshot(s, history)
    img = compact.spark.grab().toImage()

    def rows_of(quantity: str, x: int) -> list[int]:
        """The rows of column ``x`` drawn in the quantity's colour."""
        want = theme.color(quantity)
        return [y for y in range(img.height()) if sum(abs(a - b) for a, b in zip(
            QtGui.QColor(img.pixel(x, y)).getRgb()[:3], want.getRgb()[:3], strict=True)) < 30]

    w = img.width()
    assert rows_of("decode", round(w * 0.1)) and rows_of("decode", round(w * 0.9))
    gap = round(w * 30 / 59)
    near = range(gap - 4, gap + 5)  # the ceiling is dashed: one of these columns holds a dash
    assert not any(rows_of("decode", x) for x in near) and any(rows_of("ceiling", x) for x in near)
    late = [x for x in range(round(w * 0.85), round(w * 0.95)) if rows_of("ceiling", x)]
    assert late and max(rows_of("ceiling", late[0])) < min(rows_of("decode", late[0]))  # above decode


def test_save_as_png_writes_the_compact_view(qtbot, settings: Settings, tmp_path: Path) -> None:
    win = _window(qtbot, settings)
    win.on_snapshot(SyntheticMonitor().snapshot(4))
    compact = win.show_compact()
    compact.resize(380, 150)
    QtWidgets.QApplication.processEvents()
    out = win.save_compact_png(str(tmp_path / "c.png"))
    img = QtGui.QImage(str(out))
    assert img.width() == 380 * img.devicePixelRatio() and img.height() > 150  # its caption under it


def test_kvmon_compact_is_on_the_command_line() -> None:
    from kvmon.cli import build_parser

    assert build_parser().parse_args(["--compact"]).compact
    assert build_parser().parse_args(["screenshot", "--compact", "-o", "x.png"]).compact


def test_on_a_mac_the_headroom_is_under_the_gpu_limit() -> None:
    """Unified memory: the room before macOS pages GPU memory, as the memory bar draws it up to its limit's mark."""
    from kvmon.core.snapshot import GpuView

    gib = 1024**3
    mac = GpuView(index=0, name="Apple M2 Max", kind="unified_memory", vram_total_bytes=64 * gib,
                  vram_used_bytes=53 * gib, vram_free_bytes=11 * gib, weights_bytes=40 * gib,
                  kv_allocated_bytes=6 * gib, server_other_bytes=gib, working_set_limit_bytes=48 * gib)
    s = dataclasses.replace(SyntheticMonitor().snapshot(3), gpus=(mac,))
    assert compact_words(s).headroom == "1.00 GiB under the GPU limit"
