"""Speed over time as a user reads it: decode solid with idle gaps as gaps, events in one lane whose words never
print over each other nor leave the chart, a time axis that fits the data."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import pytest

pytest.importorskip("pytestqt")

from PySide6 import QtCore, QtWidgets
from stories import Watch
from story_window import watch_in_window
from synthetic import SyntheticMonitor

from kvmon.core.history import Event, History
from kvmon.gui.panels.event_lane import LANE_PX
from kvmon.gui.panels.speed_time import SpeedTimePanel


@pytest.fixture
def panel(qtbot: Any) -> SpeedTimePanel:
    p = SpeedTimePanel(History())
    qtbot.addWidget(p)
    p.resize(600, 320)
    p.show()
    qtbot.waitExposed(p)
    p.set_window(None)
    return p


def _pixel_x(panel: SpeedTimePanel, t: float) -> float:
    x0, x1 = panel.x_range()
    return (t - x0) / (x1 - x0) * panel.plot.getPlotItem().vb.width()


def _nothing_drawn_between(panel: SpeedTimePanel, t0: float, t1: float) -> bool:
    """No line and no fill of decode between two times (a strip a few pixels inside them, the chart's height)."""
    vb = panel.plot.getPlotItem().vb
    a, b = _pixel_x(panel, t0) + 2, _pixel_x(panel, t1) - 2
    strip = QtCore.QRectF(a, 0.0, b - a, vb.height() - 1)
    return not panel.decode.path().intersects(strip) and not panel.decode.fill_path().intersects(strip)


def test_decode_is_solid_and_an_idle_gap_is_a_gap(panel: SpeedTimePanel) -> None:
    """Decode is a solid line over a filled area (never a dash pattern like the ceiling's); the polls where nothing
    decoded are empty space, whether the window was drawn whole or extended poll by poll."""
    assert panel.decode.opts["pen"].style() == QtCore.Qt.PenStyle.SolidLine
    assert panel.ceiling.opts["pen"].style() != QtCore.Qt.PenStyle.SolidLine
    mon = SyntheticMonitor()
    snaps = [mon.snapshot(i) if not 10 <= i < 20 else dataclasses.replace(mon.snapshot(i), decode_tok_s=None)
             for i in range(30)]
    for s in snaps:
        panel.history.append(s)
    panel.refresh()
    assert not panel.decode.fill_path().isEmpty()
    assert _nothing_drawn_between(panel, snaps[10].t_wall, snaps[19].t_wall)  # the idle polls
    assert not _nothing_drawn_between(panel, snaps[2].t_wall, snaps[8].t_wall)  # while decoding: drawn
    more = [dataclasses.replace(mon.snapshot(i), decode_tok_s=None) if i < 34 else mon.snapshot(i)
            for i in range(30, 36)]
    x_range = panel.x_range()
    for s in more:  # appended poll by poll (the axis stays)
        panel.history.append(s)
        panel.refresh()
    assert panel.x_range() == x_range
    assert _nothing_drawn_between(panel, snaps[29].t_wall, more[3].t_wall)
    assert not _nothing_drawn_between(panel, more[3].t_wall, more[5].t_wall)


def test_the_time_axis_fits_the_data_and_grows_to_the_window(panel: SpeedTimePanel) -> None:
    """Ten seconds of polls fill most of the axis, not a tenth of five minutes; the axis grows in round steps to the
    window, then moves on with it."""
    panel.set_window(300.0)
    mon = SyntheticMonitor()
    spans = {}
    for i in range(400):
        panel.history.append(mon.snapshot(i))
        panel.refresh()
        x0, x1 = panel.x_range()
        assert x0 <= mon.snapshot(0).t_wall or (i > 250 and x1 - x0 == 300.0)
        assert mon.snapshot(i).t_wall < x1  # the newest sample is on the axis
        spans[i] = x1 - x0
    assert spans[9] <= 20.0 and spans[40] <= 60.0 and spans[100] <= 120.0 and spans[399] == 300.0
    assert 9 / spans[9] > 0.4 and 100 / spans[100] > 0.6
    growth = list(spans.values())
    assert all(a <= b for a, b in itertools.pairwise(growth))  # it only grows
    assert all(s in (20.0, 30.0, 60.0, 120.0, 300.0) for s in spans.values())


def _events(n: int, t0: float, every_s: float) -> list[Event]:
    kinds = ("loading", "loaded", "followed", "sleeping", "failed", "unloaded")
    return [Event(t0 + i * every_s, kinds[i % len(kinds)], f"model-{i}", f"model-{i} {kinds[i % len(kinds)]}")
            for i in range(n)]


def _lane_problems(panel: SpeedTimePanel) -> list[str]:
    lane = panel.events
    out = []
    texts = lane.texts()
    rects = [t.mapRectToItem(lane, t.boundingRect()) for t in texts]
    for (ta, a), (tb, b) in itertools.combinations(zip(texts, rects, strict=True), 2):
        if a.intersects(b):
            out.append(f"{ta.text()!r} overlaps {tb.text()!r}")
    for t, r in zip(texts, rects, strict=True):
        if r.left() < 0 or r.right() > lane.size().width() or r.top() < 0 or r.bottom() > LANE_PX:
            out.append(f"{t.text()!r} is cut at {r.getRect()} in a lane of {lane.size().width()}")
        for m in lane.marks:
            if r.intersects(QtCore.QRectF(*m.tick())):
                out.append(f"{t.text()!r} covers a mark")
    return out


@pytest.mark.parametrize("width", [600, 360])
def test_events_never_print_over_each_other_and_say_everything_on_hover(panel: SpeedTimePanel, qtbot: Any,
                                                                         width: int) -> None:
    """A burst of loads, follows and a failure in a few seconds, and one at the very right edge: merged into marks
    whose words never touch; the failure names its mark; every event is in a mark's tooltip."""
    panel.resize(width, 320)
    qtbot.waitUntil(lambda: panel.width() == width, timeout=2000)
    mon = SyntheticMonitor()
    snaps = [mon.snapshot(i) for i in range(60)]
    for s in snaps:
        panel.history.append(s)
    panel.refresh()
    x0, x1 = panel.x_range()
    burst = [*_events(6, snaps[20].t_wall, 0.7), Event(x1 - 0.01, "loaded", "a-model-with-a-long-name-q4", "last")]
    for ev in burst:
        panel.history.events.append(ev)
        panel.history.events_added += 1
    panel.refresh()
    QtWidgets.QApplication.processEvents()
    assert panel.x_range() == (x0, x1)
    assert not _lane_problems(panel), _lane_problems(panel)
    marks = panel.markers()
    assert sum(len(m.events) for m in marks) == len(burst)
    failed = next(m for m in marks if any(e.kind == "failed" for e in m.events))
    assert failed.text.startswith("model-4 failed")  # the most telling event names a merged mark
    tips = "\n".join(t.toolTip() for t in panel.events.texts())
    assert all(ev.message in tips for ev in burst)


def test_the_router_story_marks_its_events_in_one_lane(qapp: Any) -> None:
    """The router demo loads, follows, fails and sleeps: at every poll no two event texts overprint, none is cut."""
    found: list[str] = []
    counts: list[int] = []

    def look(win: Any, shown: Any) -> None:
        found.extend(f"{shown.t_s:.0f} s: {p}" for p in _lane_problems(win.speed_time))
        counts.append(sum(len(m.events) for m in win.speed_time.markers()))

    watch_in_window("router", Watch(0.0, 130.0, 1.0), on_poll=look)
    assert not found, "\n".join(found[:10])
    assert max(counts) >= 5  # loading, loaded, followed, failed, sleeping


def test_after_a_reload_into_host_ram_the_new_speed_reads_and_the_fall_stays_in_view(qapp: Any) -> None:
    """spill-4090 reloads into host RAM (72 → 7 tok/s): a minute on, the speed axis fits the new speed (not the old
    0–150 scale, where it lay flat on the bottom), the earlier speeds still run off its top before the reload mark,
    said in words, and its top agrees with the speed-vs-context chart's, which fits the new regime."""
    last: dict[str, Any] = {}

    def look(win: Any, shown: Any) -> None:
        st = win.speed_time
        last.update(t_s=shown.t_s, top=st.plot.getPlotItem().viewRange()[1][1], decode=shown.snapshot.decode_tok_s,
                    ctx_top=win.speed_context.plot.getPlotItem().viewRange()[1][1],
                    above=st.above.text() if getattr(st, "above", None) and st.above.isVisible() else "",
                    above_tip=st.above.toolTip(),
                    x_range=st.x_range(),
                    reloads=[e.t_wall for e in st.history.events if e.kind == "reloaded"],
                    fill=st.decode.fill_path(), width=st.plot.getPlotItem().vb.width())

    watch_in_window("spill-4090", Watch(280.0, 420.0, 2.0), on_poll=look)
    assert last["decode"] is not None and last["decode"] < 10.0  # the new regime decodes
    assert last["top"] <= 4 * last["decode"], last  # its line fills a quarter of the chart or more
    assert last["ctx_top"] / 2 <= last["top"] <= last["ctx_top"] * 2, last
    (x0, x1), reload_t = last["x_range"], last["reloads"][-1]
    assert x0 < reload_t < x1  # the fall is in the window
    reload_x = (reload_t - x0) / (x1 - x0) * last["width"]
    assert last["fill"].intersects(QtCore.QRectF(0.0, 0.0, reload_x, 2.0))  # earlier decode runs off the top
    # said in words, with no second figure for "before" beside the header's; how high it ran is on hover
    assert last["above"] == "↑ faster before, above this scale"
    assert float(last["above_tip"].split("decode up to ")[1].split()[0]) > 60.0


def test_the_scale_fits_the_whole_window_when_no_regime_is_squashed() -> None:
    """A change to a regime about as fast (another context size) keeps one scale over both; so does a window with
    nothing before the change."""
    import numpy as np

    from kvmon.gui.panels.speed_time import speed_scale

    t = np.arange(10.0)
    decode = np.array([60.0] * 5 + [45.0] * 5)
    ceiling = np.array([100.0] * 5 + [80.0] * 5)
    assert speed_scale(t, decode, ceiling, 5.0).top == 100.0 and not speed_scale(t, decode, ceiling, 5.0).cut
    assert speed_scale(t, decode, ceiling, 0.0).top == 100.0
    fell = speed_scale(t, np.array([72.0] * 5 + [7.0] * 5), np.array([120.0] * 5 + [11.0] * 5), 5.0)
    assert (fell.top, fell.earlier_decode, fell.earlier_ceiling, fell.cut) == (11.0, 72.0, 120.0, True)
