"""Several servers in one window: a tab each with its own history, tally and recording, the tray on the busiest;
a router's models shown as chips, a click choosing the model shown (through the poller to the monitor); loads,
unloads and sleeps marked on the speed-over-time plot."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")

from synthetic import SyntheticMonitor

from kvmon.app.servers import ServerSet, WatchedServer, busiest
from kvmon.app.session import Session
from kvmon.app.store import SessionStore
from kvmon.core.serving import ServedModel, ServingEvent, ServingView
from kvmon.core.snapshot import Alert, AlertLevel, Snapshot
from kvmon.gui.app import build_servers_window
from kvmon.gui.server_tabs import ServerTabs, ServerView
from kvmon.gui.settings import Settings


class RouterLike(SyntheticMonitor):
    """The synthetic monitor dressed as a router's: a models list, events on some polls, and a follow() it records."""

    def __init__(self) -> None:
        super().__init__()
        self.followed: list[str | None] = []

    def follow(self, name: str | None) -> None:
        self.followed.append(name)

    def poll(self) -> Snapshot:
        s = super().poll()
        events = (ServingEvent(s.t_monotonic, s.t_wall, "gemma-3-12b", "loaded", "gemma-3-12b loaded"),) \
            if self.seq == 2 else ()
        view = ServingView("router", models=(
            ServedModel("qwen3-8b", "loaded", followed=True, processing=True, decode_tok_s=s.decode_tok_s,
                        context_tokens=s.context_tokens, n_ctx=32768),
            ServedModel("gemma-3-12b", "loading", progress=0.42),
            ServedModel("gpt-oss-20b", "sleeping", note="sleeping (idle): its /slots is not asked"),
        ), followed="qwen3-8b", follow_reason="generating", events=events)
        return dataclasses.replace(s, serving=view)


def _window(qtbot, tmp_path: Path, monitors: dict[str, object]):  # type: ignore[no-untyped-def]
    servers = ServerSet([WatchedServer(k, f"server {k}", Session(lambda m=m: m)) for k, m in monitors.items()])
    win, ctl = build_servers_window(servers, Settings(str(tmp_path / "s.ini")), 0.05, tray=False)
    qtbot.addWidget(win)
    win.resize(1280, 800)
    win.show()
    return win, ctl


def test_each_server_has_its_own_tab_history_and_recording(qtbot, tmp_path: Path) -> None:
    a, b = SyntheticMonitor(tokens_per_poll=100), RouterLike()
    win, ctl = _window(qtbot, tmp_path, {"a": a, "b": b})
    ctl.start()
    try:
        qtbot.waitUntil(lambda: all(v.last is not None and len(v.store.history) >= 3 for v in win.views.values()),
                        timeout=10000)
        assert win.server_tabs.isVisible() and win.server_tabs.count() == 2
        assert win.current == "a" and not win.models.isVisible()  # a plain server: no models strip
        before_a = len(win.views["a"].store.history)
        win.select_server("b")
        b = win.views["b"].store
        assert win.current == "b" and win.history is b.history and win.tally is b.tally
        qtbot.waitUntil(lambda: win.models.isVisible() and len(win.models.chips) == 3, timeout=5000)
        assert len(win.views["a"].store.history) >= before_a  # the hidden server keeps being polled and stored
        # recording is the shown server's
        out = tmp_path / "b.jsonl"
        win.record_requested.emit(str(out))
        assert ctl.servers["b"].session.recorder.path == str(out) and ctl.servers["a"].session.recorder.path is None
        win.record_requested.emit(None)
        # closing a tab stops that server; the last one cannot be closed
        ctl.remove("a")
        assert list(win.views) == ["b"] and "a" not in ctl.pollers and not win.server_tabs.isVisible()
        ctl.remove("b")
        assert list(win.views) == ["b"]
    finally:
        ctl.stop()
    assert out.exists() and out.read_text().count("\n") >= 1


def test_a_router_s_models_are_chips_and_a_click_chooses_the_model_shown(qtbot, tmp_path: Path) -> None:
    router = RouterLike()
    win, ctl = _window(qtbot, tmp_path, {"r": router})
    ctl.start()
    try:
        qtbot.waitUntil(lambda: win.models.isVisible() and len(win.models.chips) == 3, timeout=10000)
        chips = win.models.chips
        assert chips["qwen3-8b"].isChecked() and "tok/s" in chips["qwen3-8b"].text()
        assert "loading 42 %" in chips["gemma-3-12b"].text()
        assert "sleeping" in chips["gpt-oss-20b"].text() and "/slots is not asked" in chips["gpt-oss-20b"].toolTip()
        assert "llama-server router" in win.models.title and "generating" in win.models.title
        assert "llama-server router" == win.header.backend.whole()
        chips["gemma-3-12b"].click()
        qtbot.waitUntil(lambda: "gemma-3-12b" in router.followed, timeout=5000)  # through the poller thread
        assert win.views["r"].pinned == "gemma-3-12b"
        chips["gemma-3-12b"].click()  # again: follow the one being chatted with
        qtbot.waitUntil(lambda: router.followed[-1] is None, timeout=5000)
        # the load event is a marker on speed over time
        qtbot.waitUntil(lambda: len(win.speed_time.markers()) == 1, timeout=5000)
        marker = win.speed_time.markers()[0]
        assert marker.text == "gemma-3-12b loaded"
        assert [t.text() for t in win.speed_time.events.texts()] == [marker.text]
        assert len(win.history.events) == 1
    finally:
        ctl.stop()


def test_the_tray_shows_the_busiest_server() -> None:
    s = SyntheticMonitor()
    fast, slow = s.snapshot(1), s.snapshot(30)
    idle = dataclasses.replace(fast, decode_tok_s=None, alerts=())
    warned = dataclasses.replace(idle, alerts=(Alert(AlertLevel.WARNING, "vram_full_soon", "VRAM full soon"),))
    assert fast.decode_tok_s and slow.decode_tok_s and fast.decode_tok_s > slow.decode_tok_s
    assert busiest({"a": slow, "b": fast, "c": None}) == "b"
    assert busiest({"a": idle, "b": warned}) == "b"  # nobody decodes: the one with a warning
    assert busiest({"a": idle, "b": None}) is None  # nothing to say: the one on screen


def test_a_rising_alert_of_any_server_is_notified_with_its_name(qtbot, tmp_path: Path) -> None:
    servers = ServerSet([WatchedServer(k, f"server {k}", Session(lambda m=m: m)) for k, m in
                         {"a": SyntheticMonitor(tokens_per_poll=100), "b": SyntheticMonitor(tokens_per_poll=4000)}
                         .items()])
    win, ctl = build_servers_window(servers, Settings(str(tmp_path / "s.ini")), 0.05, tray=True)
    qtbot.addWidget(win)
    ctl.start()
    try:
        assert win.tray is not None
        qtbot.waitUntil(lambda: any(n.startswith("server b: context full") for n in win.tray.notified), timeout=10000)
        assert not any(n.startswith("server a:") for n in win.tray.notified)
    finally:
        ctl.stop()


def test_one_servers_hidden_tab_is_not_relabelled_each_poll_and_says_its_speed_once_shown(qtbot) -> None:
    """With one server the tab bar is hidden: its speed moves every poll and each new tab text lays the bar out
    again, for nothing seen. When a second server comes, both tabs say their servers as they are then."""
    from types import SimpleNamespace

    from kvmon.core.snapshot import Connection, ConnectionStatus
    from kvmon.gui.server_tabs import ServerTabs

    def snap(tok_s: float) -> Snapshot:
        return Snapshot(seq=1, t_monotonic=0.0, t_wall=0.0, connection=Connection(ConnectionStatus.CONNECTED),
                        decode_tok_s=tok_s)

    views = {"a": SimpleNamespace(key="a", label="server a", last=None)}
    tabs = ServerTabs(views, "a")
    qtbot.addWidget(tabs)
    for tok_s in (40.0, 41.0, 42.0):
        views["a"].last = snap(tok_s)
        tabs.paint(views["a"])
    assert tabs.isHidden() and tabs.tabText(0) == "server a"
    views["b"] = SimpleNamespace(key="b", label="server b", last=snap(9.0))
    tabs.add(views["b"])
    assert not tabs.isHidden() and [tabs.tabText(i) for i in range(2)] == ["server a · 42 tok/s", "server b · 9 tok/s"]
    views["a"].last = snap(43.0)
    tabs.paint(views["a"])
    assert tabs.tabText(0) == "server a · 43 tok/s"


def test_an_ampersand_in_a_server_name_is_shown(qtbot) -> None:
    """A server's tab says its name as written: an ampersand in it is a character, not a keyboard shortcut."""
    views = {k: ServerView(k, label, SessionStore()) for k, label in (("a", "R&D box"), ("b", "lab"))}
    tabs = ServerTabs(views, "a")
    qtbot.addWidget(tabs)
    assert tabs.tabText(0) == "R&&D box"  # Qt draws "&&" as one "&" and makes no shortcut of it
    # a mnemonic would have made Alt+D a shortcut: none is there
    assert all("&" not in t.replace("&&", "") for t in (tabs.tabText(i) for i in range(tabs.count())))
