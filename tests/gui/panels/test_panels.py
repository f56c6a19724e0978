"""Dashboard panels on synthetic Snapshots: the numbers shown, tooltips with provenance, unknowns, no idle repaint."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from PySide6 import QtCore, QtGui, QtWidgets
from synthetic import SyntheticMonitor

from kvmon.core.snapshot import (
    Alert,
    AlertLevel,
    GpuView,
    HostView,
    Regime,
)
from kvmon.core.verdict import decided
from kvmon.gui import theme
from kvmon.gui.main_window import MainWindow
from kvmon.gui.panels.memory import gpu_bar, host_bar
from kvmon.gui.settings import Settings
from kvmon.gui.tray import rising_alerts, tray_text

GIB = 1024**3


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(str(tmp_path / "kvmon-test.ini"))


@pytest.fixture(scope="module")
def shared_window(qapp, tmp_path_factory):
    """One window for the module (building one costs ~1 s on a busy machine); reset before each test."""
    settings = Settings(str(tmp_path_factory.mktemp("gui") / "kvmon-test.ini"))
    w = MainWindow(settings, tray=False)
    w.resize(1280, 800)
    w.show()
    yield w
    w.close()
    w.deleteLater()


@pytest.fixture
def window(shared_window: MainWindow, qtbot, settings: Settings) -> MainWindow:
    w = shared_window
    w.reset()
    w.settings = settings
    if w.isMinimized() or not w.isVisible():
        w.showNormal()
    qtbot.waitExposed(w)
    return w


def test_memory_bar_stacks_weights_kv_other_free_and_shades_kv_in_use() -> None:
    s = SyntheticMonitor().snapshot(10)
    bar = gpu_bar(s.gpus[0], s)
    assert bar is not None
    quantities = [seg.quantity for seg in bar.segments]
    assert quantities == ["weights", "kv_allocated", "server_other", "other_processes", "free"]
    g = s.gpus[0]
    kv = bar.segments[1]
    assert kv.shade_fraction == pytest.approx(g.kv_in_use_bytes / g.kv_allocated_bytes)
    assert bar.total == 24 * GIB and bar.limit_line
    assert "free 16.8 GiB" in bar.note.replace("\n", " ")


def test_the_draft_model_has_its_part_of_each_bar_and_of_the_legend(window: MainWindow) -> None:
    """Speculative decoding's draft model: its weights and KV cache in a part of their own, after the model's KV,
    named in the legend only while a bar has one."""
    s = SyntheticMonitor().snapshot(10)
    window.on_snapshot(s)
    assert "draft model" not in window.memory.legend.words()
    model = dataclasses.replace(s.model, draft_name="llama-1b.gguf", draft_weight_bytes=GIB,
                                draft_kv_type_k="q8_0", draft_kv_type_v="q8_0", draft_kv_allocated_bytes=GIB // 4)
    g = dataclasses.replace(s.gpus[0], draft_bytes=GIB + GIB // 4)
    drafted = dataclasses.replace(s, model=model, gpus=(g, *s.gpus[1:]),
                                  host=dataclasses.replace(s.host, draft_in_host_bytes=GIB // 2))
    bar = gpu_bar(drafted.gpus[0], drafted)
    assert bar is not None
    assert [seg.quantity for seg in bar.segments][:3] == ["weights", "kv_allocated", "draft"]
    part = bar.segments[2]
    assert part.value == GIB + GIB // 4
    assert "llama-1b.gguf" in part.tip and "weights 1.00 GiB" in part.tip and "(q8_0/q8_0) 256 MiB" in part.tip
    hb = host_bar(drafted)
    assert hb is not None and hb.segments[0].quantity == "draft" and "draft 512 MiB" in hb.note
    window.on_snapshot(drafted)
    assert "draft model" in window.memory.legend.words()


def test_memory_bar_unknown_total_is_omitted_and_host_ram_appears_only_when_used() -> None:
    s = SyntheticMonitor().snapshot(1)
    assert gpu_bar(GpuView(index=0, name="x"), s) is None
    assert host_bar(s) is None
    spilled = dataclasses.replace(s, host=HostView(ram_total_bytes=64 * GIB, ram_available_bytes=30 * GIB,
                                                   kv_in_host_bytes=3 * GIB, host_bandwidth_bytes_per_s=60e9))
    hb = host_bar(spilled)
    assert hb is not None and hb.label == "Host"
    assert hb.segments[0].quantity == "kv_allocated"
    assert "3.00 GiB" in hb.note


def test_host_bar_parts_never_add_up_to_more_than_the_ram() -> None:
    """The model's mapped file counts as available RAM too: the bar's free part is what the bar has left."""
    s = SyntheticMonitor().snapshot(1)
    mapped = dataclasses.replace(s, host=HostView(ram_total_bytes=32 * GIB, ram_available_bytes=28 * GIB,
                                                  weights_in_host_bytes=3 * GIB, kv_in_host_bytes=9 * GIB))
    hb = host_bar(mapped)
    assert hb is not None
    assert sum(seg.value for seg in hb.segments) == pytest.approx(32 * GIB)
    assert [seg.quantity for seg in hb.segments] == ["weights", "kv_allocated", "free"]
    assert "28.0 GiB" in hb.segments[-1].tip  # the tooltip still says what the system reports available


def test_bandwidth_panel_and_no_gpu_reason(window: MainWindow) -> None:
    s = SyntheticMonitor().snapshot(5)
    window.on_snapshot(s)
    bars = window.bandwidth.bars.bars
    assert len(bars) == 2
    assert "of 936 GB/s" in bars[0].note and "PCIe" in bars[0].note
    nogpu = dataclasses.replace(s, gpus=(), gpus_unavailable_reason="no NVIDIA GPU (NVML not found)")
    window.on_snapshot(nogpu)
    assert window.bandwidth.bars.bars == ()
    assert window.memory.bars._empty_text.endswith("no NVIDIA GPU (NVML not found)")
    assert window.header.gpus.whole() == "no GPU data"


def test_nothing_painted_while_minimised_then_caught_up(window: MainWindow, qtbot) -> None:
    mon = SyntheticMonitor()
    window.on_snapshot(mon.poll())
    renders = window.render_count
    window.showMinimized()
    qtbot.waitUntil(lambda: not window.painting(), timeout=2000)
    for _ in range(5):
        window.on_snapshot(mon.poll())
    assert window.render_count == renders
    assert len(window.history) == 6
    window.showNormal()
    qtbot.waitUntil(lambda: window.render_count == renders + 1, timeout=2000)
    assert "3.60K" in window.header.context.whole()  # 1,200 + 6 polls × 400 tokens


def test_an_unchanged_snapshot_repaints_no_bar(window: MainWindow, qtbot) -> None:
    s = SyntheticMonitor().snapshot(4)
    window.on_snapshot(s)
    qtbot.wait(20)
    assert window.memory.bars.set_bars(window.memory.bars.bars, window.memory.bars._empty_text) is False
    before = window.memory.bars.paint_count
    window.on_snapshot(dataclasses.replace(s, seq=5))
    qtbot.wait(20)
    assert window.memory.bars.paint_count == before


def test_gaps_are_nan_in_the_plot_not_zero(window: MainWindow) -> None:
    mon = SyntheticMonitor()
    window.on_snapshot(mon.poll())
    mon.fail = True
    window.on_snapshot(mon.poll())
    mon.fail = False
    window.on_snapshot(mon.poll())
    window.speed_time.refresh()
    _x, y = window.speed_time.decode.getData()
    assert y is not None and len(y) == 3
    assert y[0] > 0 and y[2] > 0 and y[1] != y[1]  # NaN: drawn as a gap


def test_a_lone_sample_between_gaps_is_drawn_over_its_interval(window: MainWindow) -> None:
    """A short reply gives one decode sample between idle polls: a line cannot show it, a segment over its interval
    (from the previous poll to its own) does; a longer run starts at the poll before its first sample."""
    mon = SyntheticMonitor()
    snaps = [mon.snapshot(i) for i in range(6)]
    for i, snap in enumerate(snaps):
        window.on_snapshot(snap if i == 2 else dataclasses.replace(snap, decode_tok_s=None))
    window.speed_time.refresh()
    x, y = window.speed_time.decode.drawn()
    finite = np.isfinite(y)
    assert list(y[finite]) == [snaps[2].decode_tok_s] * 2
    assert list(x[finite]) == pytest.approx([snaps[1].t_wall, snaps[2].t_wall])
    window.reset()
    for i, snap in enumerate(snaps):  # one run after an idle poll: drawn from that poll on
        window.on_snapshot(snap if i else dataclasses.replace(snap, decode_tok_s=None))
    window.speed_time.refresh()
    x, y = window.speed_time.decode.drawn()
    assert len(x) == len(snaps) + 1 and y[1] == y[2] == snaps[1].decode_tok_s
    assert list(x[1:3]) == [snaps[0].t_wall, snaps[1].t_wall]


def test_a_poll_extends_the_strip_chart_and_repaints_only_its_new_segment(window: MainWindow) -> None:
    """Within a step the time axis stays and a poll repaints a sliver; at the right edge the axis steps on."""
    st = window.speed_time
    mon = SyntheticMonitor()
    window.load([mon.snapshot(i) for i in range(330)])  # more than the 5-minute window: it scrolls
    st.refresh()
    x_range = st.x_range()
    width = st.plot.getPlotItem().vb.width()
    assert x_range[1] - x_range[0] == pytest.approx(300.0)
    n_before = len(st.decode.getData()[0])
    snap = mon.snapshot(330)
    if snap.t_wall >= x_range[1]:  # this sample would step the axis: take the next step's first one instead
        window.on_snapshot(snap)
        st.refresh()
        x_range, n_before = st.x_range(), len(st.decode.getData()[0])
        snap = mon.snapshot(331)
    window.on_snapshot(snap)
    st.refresh()
    assert st.x_range() == x_range and len(st.decode.getData()[0]) == n_before + 1
    assert st.decode.getData()[0][-1] == snap.t_wall
    assert 0 < st.decode.last_dirty.width() < width / 10
    i = 332
    while mon.snapshot(i).t_wall < x_range[1]:
        i += 1
    window.on_snapshot(mon.snapshot(i))  # past the right edge (after a gap of polls): the axis steps on
    st.refresh()
    assert st.x_range()[1] > x_range[1] and st.x_range()[1] - st.x_range()[0] == pytest.approx(300.0)
    assert st.decode.getData()[0][-1] == mon.snapshot(i).t_wall


def test_an_hour_of_samples_is_drawn_with_fewer_points_and_its_peak(window: MainWindow) -> None:
    from kvmon.gui.panels.speed_time import MAX_POINTS

    mon = SyntheticMonitor(tokens_per_poll=3, n_ctx=262144)
    snaps = [mon.snapshot(i) for i in range(3600)]
    snaps[1800] = dataclasses.replace(snaps[1800], decode_tok_s=999.0)
    window.load(snaps)
    window.speed_time.set_window(3600.0)
    x, y = window.speed_time.decode.getData()
    assert y is not None and len(y) <= MAX_POINTS and float(np.nanmax(y)) == 999.0
    assert x[0] == pytest.approx(snaps[0].t_wall) and x[-1] == snaps[-1].t_wall
    x0, x1 = window.speed_time.x_range()
    assert x1 - x0 == 3600.0 and x[0] - 1 <= x0 < x[0] + 300 and x[-1] < x1  # the axis steps by 5 min
    window.speed_time.set_window(300.0)


def test_window_range_shortcuts_and_settings_remembered(window: MainWindow, qtbot, settings: Settings) -> None:
    qtbot.keyClick(window, "2")
    assert window.speed_time.window_s == 3600.0
    qtbot.keyClick(window, "3")
    assert window.speed_time.window_s is None
    assert settings.window_range == "session"
    window.close()
    assert settings.geometry is not None
    again = MainWindow(settings, tray=False)
    qtbot.addWidget(again)
    assert again.speed_time.window_s is None


def test_ctrl_q_closes_the_window(window: MainWindow, qtbot) -> None:
    qtbot.keyClick(window, QtCore.Qt.Key.Key_Q, QtCore.Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: not window.isVisible(), timeout=2000)


def test_space_pauses_and_f5_reconnects(window: MainWindow, qtbot) -> None:
    with qtbot.waitSignal(window.pause_toggled) as sig:
        qtbot.keyClick(window, QtCore.Qt.Key.Key_Space)
    assert sig.args == [True]
    with qtbot.waitSignal(window.reconnect_requested):
        qtbot.keyClick(window, QtCore.Qt.Key.Key_F5)


def test_api_key_is_stored_only_when_remembered(tmp_path: Path) -> None:
    path = str(tmp_path / "k.ini")
    s = Settings(path)
    s.set_api_key("secret-123", remember=False)
    s.sync()
    assert s.api_key == "secret-123"
    assert "secret-123" not in Path(path).read_text()
    assert Settings(path).api_key is None
    s.set_api_key("secret-456", remember=True)
    s.sync()
    assert Settings(path).api_key == "secret-456"


def test_settings_dialog_masks_the_key(window: MainWindow, qtbot) -> None:
    window.settings.set_api_key("hidden-key", remember=False)
    dlg = window.open_settings()
    qtbot.addWidget(dlg)
    assert dlg.api_key.echoMode() == QtWidgets.QLineEdit.EchoMode.Password
    dlg.interval.setValue(2.5)
    dlg.url.setText("http://127.0.0.1:9999")
    with qtbot.waitSignal(window.settings_changed):
        dlg.accept()
    assert window.settings.interval_s == 2.5 and window.settings.url == "http://127.0.0.1:9999"


def test_tray_notifies_only_rising_warning_alerts() -> None:
    warn = Alert(AlertLevel.WARNING, "ctx_full_soon", "context full soon")
    info = Alert(AlertLevel.INFO, "advice", "try q8_0")
    assert rising_alerts(frozenset(), (warn, info)) == [warn]
    assert rising_alerts(frozenset({"ctx_full_soon"}), (warn,)) == []
    assert tray_text(None) == "–" and tray_text(38.4) == "38"


def test_tray_sends_the_icon_and_the_tip_only_when_each_changed(qtbot) -> None:
    """The tip's tenths move most polls; the icon (a pixmap drawn and sent to the tray) only when its whole tok/s
    or colour does."""

    from kvmon.gui.tray import Tray

    class CountingIcon(QtWidgets.QSystemTrayIcon):
        def __init__(self) -> None:
            super().__init__()
            self.icons: list[QtGui.QIcon] = []
            self.tips: list[str] = []

        def setIcon(self, icon: QtGui.QIcon) -> None:
            self.icons.append(icon)
            super().setIcon(icon)

        def setToolTip(self, tip: str) -> None:
            self.tips.append(tip)
            super().setToolTip(tip)

    tray = Tray()
    tray.icon = icon = CountingIcon()
    base = SyntheticMonitor().snapshot(1)
    for tok_s in (38.1, 38.2, 38.4, 38.4, 39.0):
        tray.show_snapshot(dataclasses.replace(base, decode_tok_s=tok_s, alerts=()))
    assert len(icon.icons) == 2  # 38, then 39
    assert [t.splitlines()[-1].split(" of ")[0] for t in icon.tips] == ["38.1 tok/s", "38.2 tok/s", "38.4 tok/s",
                                                                         "39.0 tok/s"]
    assert all(t.splitlines()[1] == f"Decoding: {base.verdict.sentence}" for t in icon.tips)  # the headline's words
    tray.show_snapshot(decided(dataclasses.replace(base, decode_tok_s=39.0, alerts=(
        Alert(AlertLevel.WARNING, "ctx_full_soon", "context full soon", headline="Context full in ~2,300 tokens"),))))
    assert len(icon.icons) == 3 and len(icon.tips) == 5  # the verdict's colour: a new icon; its words: a new tip
    assert icon.tips[-1].splitlines()[1] == "Context filling: Context full in ~2,300 tokens"


def test_model_change_clears_measured_points(window: MainWindow) -> None:
    mon = SyntheticMonitor()
    for _ in range(5):
        window.on_snapshot(mon.poll())
    assert window.bins.points()[0].size == 5
    s = mon.poll()
    other = dataclasses.replace(s, model=dataclasses.replace(s.model, name="other-model"))
    window.on_snapshot(other)
    assert window.bins.points()[0].size == 1


def test_reset_shows_connecting_then_the_same_alerts_again(window: MainWindow) -> None:
    s = SyntheticMonitor().snapshot(80)  # close to n_ctx: a context alert
    window.on_snapshot(s)
    assert "context full" in window.alerts.text()
    window.reset()
    assert "Connecting" in window.alerts.text() and "connecting" in window.status.connection.text()
    window.on_snapshot(s)
    assert "context full" in window.alerts.text()


def test_milestones_carry_the_forecast_and_the_curve_its_band(window: MainWindow) -> None:
    mon = SyntheticMonitor()
    s = mon.snapshot(3)
    window.on_snapshot(dataclasses.replace(s, forecast=dataclasses.replace(s.forecast, milestones=(), curve=())))
    assert window.speed_context.milestone_labels() == {}  # no forecast yet: no milestone labels, no curve
    assert window.speed_context.forecast.getData()[0] is None or len(window.speed_context.forecast.getData()[0]) == 0
    s = mon.snapshot(20)
    window.on_snapshot(s)
    # on its curve point: 1 / (17.5 ms + 0.6 µs × 8,192), as people read it
    assert window.speed_context.milestone_labels()[8192] == "8K ~44.6 tok/s"
    x, y = window.speed_context.forecast.getData()
    assert len(x) == len(s.forecast.curve) and y[0] == pytest.approx(1 / 0.0175)
    low, high = window.speed_context.forecast_low.getData()[1], window.speed_context.forecast_high.getData()[1]
    assert np.all(low < y) and np.all(y < high)  # the 80% band around it
    assert not window.speed_context.band.boundingRect().isEmpty()


def test_a_refit_that_moves_the_forecast_less_than_a_pixel_or_two_is_not_redrawn(window: MainWindow) -> None:
    s = SyntheticMonitor().snapshot(20)
    window.on_snapshot(s)
    curve = window.speed_context.forecast
    y0 = curve.getData()[1].copy()
    fc = s.forecast

    def scaled(k: float) -> tuple[tuple[int, float, float, float], ...]:
        return tuple((n, t * k, lo * k, hi * k) for n, t, lo, hi in fc.curve)

    window.on_snapshot(dataclasses.replace(s, seq=21, forecast=dataclasses.replace(fc, curve=scaled(0.999))))
    np.testing.assert_array_equal(curve.getData()[1], y0)  # 0.1 % slower: the same pixels
    window.on_snapshot(dataclasses.replace(s, seq=22, forecast=dataclasses.replace(fc, curve=scaled(0.9))))
    assert curve.getData()[1][0] == pytest.approx(fc.curve[0][1] * 0.9)


def test_a_dark_light_switch_rebuilds_the_panels_and_keeps_the_session(qtbot, tmp_path: Path) -> None:
    from kvmon.gui import theme

    w = MainWindow(Settings(str(tmp_path / "t.ini")), banner="Demo: simulated x", tray=False)
    qtbot.addWidget(w)
    w.show()
    mon = SyntheticMonitor()
    for _ in range(5):
        w.on_snapshot(mon.poll())
    w.set_recording("/recordings/a.jsonl")
    was_dark = theme.is_dark()
    old_plot = w.speed_time.plot
    try:
        w.apply_scheme(not was_dark)
        assert theme.is_dark() is (not was_dark)
        assert w.speed_time.plot is not old_plot
        assert w.speed_time.plot.backgroundBrush().color().name() == theme.background()
        assert len(w.history) == 5 and w.bins.points()[0].size == 5
        assert "3.20K" in w.header.context.whole()  # re-rendered from the last snapshot
        assert w.header.banner.whole() == "Demo: simulated x" and "recording" in w.status.recording.text()
    finally:
        w.apply_scheme(was_dark)


def test_replay_load_renders_once(window: MainWindow) -> None:
    mon = SyntheticMonitor()
    snaps = [mon.poll() for _ in range(50)]
    before = window.render_count
    window.load(snaps)
    assert window.render_count == before + 1 and len(window.history) == 50


def test_the_depth_marker_ignores_a_wobble_but_follows_a_change(window: MainWindow) -> None:
    """Decode speed wobbles by a fraction of a token per second between polls: the marker (and the plot) stays;
    a real change moves it."""
    s = SyntheticMonitor().snapshot(3)
    assert s.decode_tok_s is not None
    window.on_snapshot(s)
    here = window.speed_context.here
    y0 = here.position()[1]
    assert y0 == pytest.approx(s.decode_tok_s)
    window.on_snapshot(dataclasses.replace(s, seq=4, decode_tok_s=s.decode_tok_s + 0.4))
    assert here.position()[1] == y0
    window.on_snapshot(dataclasses.replace(s, seq=5, decode_tok_s=s.decode_tok_s * 0.8))
    assert here.position()[1] == pytest.approx(s.decode_tok_s * 0.8)


def test_the_depth_marker_is_drawn_where_its_depth_and_speed_are(window: MainWindow) -> None:
    """The dot sits at (context, decode speed) of the plot, the line runs the plot's height, and a move leaves
    nothing behind."""
    s = SyntheticMonitor().snapshot(3)
    assert s.decode_tok_s is not None and s.context_tokens is not None
    window.on_snapshot(s)
    QtWidgets.QApplication.processEvents()
    panel = window.speed_context
    vb = panel.plot.getPlotItem().getViewBox()

    def pixel(x: float, y: float) -> QtCore.QPoint:
        return panel.plot.mapFromScene(vb.mapViewToScene(QtCore.QPointF(x, y)))

    decode = theme.color("decode")

    def dot_at(img: QtGui.QImage, at: QtCore.QPoint) -> bool:  # the decode colour fills the dot's middle, opaque
        c = QtGui.QColor(img.pixel(at))
        return abs(c.red() - decode.red()) + abs(c.green() - decode.green()) + abs(c.blue() - decode.blue()) < 12

    ring = theme.color("here")

    def ring_at(img: QtGui.QImage, at: QtCore.QPoint) -> bool:  # the dot's ring, clear of a measured point's dot
        return any(abs(c.red() - ring.red()) + abs(c.green() - ring.green()) + abs(c.blue() - ring.blue()) < 90
                   for c in (QtGui.QColor(img.pixel(at + QtCore.QPoint(dx, 0))) for dx in (5, 6)))

    at = pixel(s.context_tokens, s.decode_tok_s)
    img = panel.plot.grab().toImage()
    assert dot_at(img, at) and ring_at(img, at)
    assert panel.here.boundingRect().height() == pytest.approx(vb.viewRect().height())  # the whole height
    window.on_snapshot(dataclasses.replace(s, seq=4, context_tokens=s.context_tokens * 2,
                                           decode_tok_s=s.decode_tok_s * 0.7))
    QtWidgets.QApplication.processEvents()
    img = panel.plot.grab().toImage()
    new = pixel(s.context_tokens * 2, s.decode_tok_s * 0.7)
    assert dot_at(img, new) and ring_at(img, new) and not ring_at(img, at)  # (the measured point stays at the first)


def test_the_time_axis_steps_by_a_round_tenth_of_the_window() -> None:
    from kvmon.gui.panels.speed_time import step_s

    assert [step_s(w) for w in (300.0, 3600.0, 86400.0, 8.0)] == [30.0, 300.0, 7200.0, 1.0]


def test_the_dots_bounds_follow_their_data_and_the_view(window: MainWindow) -> None:
    """The scatter's bounds are kept between repaints, never stale: new points and a new view range move them."""
    dots = window.speed_context.measured
    dots.setData([1000.0, 2000.0], [10.0, 20.0])
    first = dots.boundingRect()
    assert first is dots.boundingRect()  # kept
    assert first.contains(QtCore.QPointF(1500.0, 15.0))
    dots.setData([1000.0, 50000.0], [10.0, 90.0])
    assert dots.boundingRect().contains(QtCore.QPointF(50000.0, 90.0))
    before = dots.boundingRect()
    window.speed_context.plot.getPlotItem().setXRange(0, 1_000_000, padding=0)  # the symbols' padding, in data units
    QtWidgets.QApplication.processEvents()
    assert dots.boundingRect().width() > before.width()


def test_the_depth_marker_keeps_the_last_measured_speed_while_idle(window: MainWindow) -> None:
    s = SyntheticMonitor().snapshot(3)
    assert s.decode_tok_s is not None and s.ceiling_tok_s is not None
    window.on_snapshot(dataclasses.replace(s, decode_tok_s=None))  # nothing measured yet: the line, no dot
    here = window.speed_context.here
    assert here.position() == (s.context_tokens, None) and here.isVisible()
    window.on_snapshot(dataclasses.replace(s, seq=4))
    assert here.position()[1] == pytest.approx(s.decode_tok_s)
    window.on_snapshot(dataclasses.replace(s, seq=5, decode_tok_s=None))  # idle between replies
    assert here.position()[1] == pytest.approx(s.decode_tok_s)


def test_the_depth_marker_keeps_a_measured_speed_when_the_plot_is_made_again_while_idle(window: MainWindow) -> None:
    """A theme switch makes the plots again: while idle, the dot shows the speed measured nearest this depth."""
    mon = SyntheticMonitor(tokens_per_poll=300)
    for _ in range(6):
        window.on_snapshot(mon.poll())
    s = mon.poll()
    window.on_snapshot(s)
    idle = dataclasses.replace(s, seq=s.seq + 1, decode_tok_s=None)
    window.on_snapshot(idle)
    dark = not theme.is_dark()
    try:
        window.apply_scheme(dark)
        _x, y = window.speed_context.here.position()
        _xs, ys = window.speed_context.bins.points()
        assert y is not None and y in {float(v) for v in ys}
    finally:
        window.apply_scheme(not dark)


def test_polled_ago_ticks_only_once_polls_are_late(window: MainWindow, qtbot) -> None:
    mon = SyntheticMonitor(tokens_per_poll=100)
    window.on_snapshot(mon.poll())
    assert window.status.polled.text() == "polled just now"
    assert window._ago.remainingTime() > 1000  # polls on time (1 s) never wake the window for this text
    window.on_snapshot(mon.poll())  # a new snapshot pushes the tick back again
    assert window._ago.remainingTime() > 1000
    qtbot.waitUntil(lambda: window.status.polled.text() == "polled 2 s ago", timeout=3000)
    qtbot.waitUntil(lambda: window.status.polled.text() == "polled 3 s ago", timeout=2000)  # then each second


def test_a_poll_that_changes_nothing_shown_changes_nothing_on_screen(window: MainWindow) -> None:
    """The panels render every snapshot from what it holds (no hand-kept key of inputs): an idle poll with the same
    figures leaves every text and bar as it was, and a new speed shows at once."""
    mon = SyntheticMonitor(tokens_per_poll=100)
    s = mon.poll()
    window.on_snapshot(s)

    def shown() -> tuple[object, ...]:
        return (window.header.speed.whole(), window.header.context.whole(), window.memory.bars.bars,
                window.bandwidth.bars.bars, window.alerts.text())

    before = shown()
    # the next poll of an idle server: new sequence number and times, the same figures
    window.on_snapshot(dataclasses.replace(s, seq=s.seq + 1, t_monotonic=s.t_monotonic + 1, t_wall=s.t_wall + 1))
    assert shown() == before
    faster = dataclasses.replace(s, seq=s.seq + 2, decode_tok_s=(s.decode_tok_s or 0) + 5)
    window.on_snapshot(faster)
    assert f"{faster.decode_tok_s:.1f} tok/s" == window.header.speed.whole() != before[0]


def test_a_new_regime_is_marked_and_the_points_before_it_are_faded(window: MainWindow) -> None:
    mon = SyntheticMonitor()
    first = Regime(1, "start", "first measurements", 0.0, 0.0, 1600)
    for i in range(1, 6):
        snap = mon.snapshot(i)
        window.on_snapshot(dataclasses.replace(snap, forecast=dataclasses.replace(snap.forecast, regime=first)))
    panel = window.speed_context
    assert not panel.regime_line.isVisible() and panel.earlier.getData()[0].size == 0
    s = mon.snapshot(6)
    r = Regime(2, "reload", "reloaded; n_ctx 32,768 → 65,536", s.t_monotonic, s.t_wall, s.context_tokens)
    for k in range(6, 9):
        snap = mon.snapshot(k)
        window.on_snapshot(dataclasses.replace(snap, forecast=dataclasses.replace(snap.forecast, regime=r)))
    assert panel.regime_line.isVisible() and panel.regime_line.value() == s.context_tokens
    before, after = mon.snapshot(5).decode_tok_s, mon.snapshot(6).decode_tok_s  # the last point before, the first since
    assert panel.label_texts()["regime"] == f"reloaded: {before:.0f} → {after:.0f} tok/s"
    assert panel.earlier.getData()[0].size == 5 and panel.measured.getData()[0].size == 3
    legend = [item.text for _sample, item in window.speed_context.plot.getPlotItem().legend.items]
    assert "before this regime" in legend


def test_the_status_bar_says_where_numbers_come_from_in_a_users_words() -> None:
    import dataclasses

    from synthetic import SyntheticMonitor

    from kvmon.gui.panels.status import sources_text, sources_tip

    s = SyntheticMonitor().snapshot(3)
    s = dataclasses.replace(s, provenance={**s.provenance, "kv_type": "command_line"})
    assert sources_text(s) == "cache type from the server's command line · rate from /slots · bandwidth from the driver"
    assumed = dataclasses.replace(s, provenance={**s.provenance, "kv_type": "default"}, decode_rate_source="metrics")
    assert sources_text(assumed).startswith("cache type assumed f16 (not visible) · rate from /metrics")
    tip = sources_tip(s)
    assert "decode speed: measured" in tip and "cache type: from the server's command line" in tip
    for internal in ("command_line", "computed ·", "rate from slots"):
        assert internal not in sources_text(s)


def test_the_clock_axis_never_shows_fractions_of_a_second(qtbot) -> None:
    import time as _time

    from kvmon.gui.widgets import ClockAxis, make_plot

    ax = ClockAxis(orientation="bottom")
    plot = make_plot("t", "time", None, "speed", "tok/s", axis_items={"bottom": ax})
    qtbot.addWidget(plot)
    ax.fontMetrics = QtGui.QFontMetrics(QtGui.QFont())  # what a paint sets before asking for ticks
    t0 = 1_764_000_044.0
    for span in (2.0, 5.0, 30.0):
        ticks = ax.tickValues(t0, t0 + span, 500)
        strings = [s for spacing, vals in ticks for s in ax.tickStrings(vals, 1.0, spacing)]
        assert strings and all("." not in s for s in strings), (span, strings)
    assert _time.strftime("%H:%M:%S", _time.localtime(t0 + 1)) in [
        s for spacing, vals in ax.tickValues(t0, t0 + 5, 500) for s in ax.tickStrings(vals, 1.0, spacing)]
