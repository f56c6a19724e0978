"""Every built-in scenario's story (``stories``), point by point, in the dashboard and in ``once --json``.

Each stretch of a story is watched once in the window (offscreen: the real MainWindow, poller, monitor and sources on
the simulator over HTTP, see ``story_window``) and once through ``kvmon once --demo``'s own steps; every point is then
checked against what the widgets showed (header, memory bars, alert lines, forecast curve) and against the document.
A point that needs work not done yet is marked here, strictly: once it holds, the mark must go.
"""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any

import pytest

pytest.importorskip("pytestqt")

from stories import STORIES, Watch
from story_checks import (
    alert_problems,
    false_alarms,
    json_points,
    json_problems,
    same_headline,
    window_points,
    window_problems,
)
from story_window import Seen, watch_in_once_json, watch_in_window

# (scenario, point) → what it needs; strict: a point that starts to hold fails until its mark is removed
PENDING: dict[tuple[str, str], str] = {}  # story points a known gap keeps from holding yet (none)


def _watches() -> list[tuple[str, int, Watch]]:
    return [(name, i, w) for name, story in STORIES.items() for i, w in enumerate(story.watches)]


def _param(scenario: str, i: int, name: str) -> Any:
    reason = PENDING.get((scenario, name))
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(scenario, i, name, marks=marks, id=f"{scenario}[{i}]: {name}")


MOMENTS = [_param(s, i, m.name) for s, i, w in _watches() for m in w.moments]
KEY_MOMENTS = [_param(s, i, m.name) for s, i, w in _watches() for m in w.moments if m.level is not None]
ALERTS = [_param(s, i, a.name) for s, i, w in _watches() for a in w.alerts]
WATCHES = [pytest.param(s, i, id=f"{s}[{i}]") for s, i, _w in _watches()]

_seen: dict[tuple[str, int], list[Seen]] = {}
_docs: dict[tuple[str, int], list[tuple[float, dict[str, Any]]]] = {}


def _window(scenario: str, i: int) -> list[Seen]:
    """What the window showed through one stretch (watched once per test run)."""
    if (scenario, i) not in _seen:
        _seen[(scenario, i)] = watch_in_window(scenario, STORIES[scenario].watches[i])
    return _seen[(scenario, i)]


def _once(scenario: str, i: int) -> list[tuple[float, dict[str, Any]]]:
    if (scenario, i) not in _docs:
        _docs[(scenario, i)] = watch_in_once_json(scenario, STORIES[scenario].watches[i])
    return _docs[(scenario, i)]


def _moment(scenario: str, i: int, name: str) -> Any:
    return next(m for m in STORIES[scenario].watches[i].moments if m.name == name)


def _alert(scenario: str, i: int, name: str) -> Any:
    return next(a for a in STORIES[scenario].watches[i].alerts if a.name == name)




@pytest.mark.parametrize(("scenario", "i", "name"), MOMENTS)
def test_the_window_shows_the_story(qapp: Any, scenario: str, i: int, name: str) -> None:
    problems = window_problems(scenario, _window(scenario, i), _moment(scenario, i, name))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("scenario", "i", "name"), MOMENTS)
def test_once_json_says_the_story(scenario: str, i: int, name: str) -> None:
    problems = json_problems(scenario, _once(scenario, i), _moment(scenario, i, name))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("scenario", "i", "name"), KEY_MOMENTS)
def test_the_window_and_once_json_say_the_same_headline(qapp: Any, scenario: str, i: int, name: str) -> None:
    """At a scenario's key moment the window's headline and the document's verdict are one sentence, one level."""
    problems = same_headline(scenario, _window(scenario, i), _once(scenario, i), _moment(scenario, i, name))
    assert not problems, "\n".join(problems)




@pytest.mark.parametrize(("scenario", "i", "name"), ALERTS)
def test_the_window_raises_and_clears_the_alert(qapp: Any, scenario: str, i: int, name: str) -> None:
    problems = alert_problems(window_points(_window(scenario, i)), _alert(scenario, i, name))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("scenario", "i", "name"), ALERTS)
def test_once_json_raises_and_clears_the_alert(scenario: str, i: int, name: str) -> None:
    problems = alert_problems(json_points(_once(scenario, i)), _alert(scenario, i, name))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("scenario", "i"), WATCHES)
def test_no_false_alarm(qapp: Any, scenario: str, i: int) -> None:
    """A warning the story does not name is a false alarm, in the window or in the document."""
    w = STORIES[scenario].watches[i]
    problems = [f"window: {p}" for p in false_alarms(window_points(_window(scenario, i)), w)]
    problems += [f"once --json: {p}" for p in false_alarms(json_points(_once(scenario, i)), w)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("scenario", sorted(STORIES))
def test_once_demo_prints_the_document_of_that_point(scenario: str) -> None:
    """``kvmon once --demo S --start-at T --after N --json`` prints the document of that point of the story: the same
    readings as the steps the story checks (the command line, parsed and run as a user runs it)."""
    from kvmon.cli import main

    w = STORIES[scenario].watches[0]
    after = 4 * w.step_s
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(["once", "--demo", scenario, "--start-at", f"{w.start_at_s:g}", "--after", f"{after:g}",
                   "--interval", f"{w.step_s:g}", "--json"])
    assert rc == 0
    doc = json.loads(out.getvalue())
    t, same = next((t, d) for t, d in _once(scenario, 0) if t >= w.start_at_s + after - 0.25)
    for key in ("backend", "context_tokens", "ceiling_tok_s"):
        assert doc[key] == same[key], (key, t)
    assert doc["model"]["name"] == same["model"]["name"]
    assert [g["vram_free_bytes"] for g in doc["gpus"]] == [g["vram_free_bytes"] for g in same["gpus"]]
    assert sorted(a["code"] for a in doc["alerts"]) == sorted(a["code"] for a in same["alerts"])


def test_an_unreachable_url_says_so_in_the_window_and_in_once_json(qapp: Any, tmp_path: Any) -> None:
    """``kvmon http://127.0.0.1:PORT`` with nothing there: the headline's place says what is wrong and what to do, in
    the critical colour, and ``once --json`` says the same sentence at the same level (exit 2)."""
    import socket
    import time

    from PySide6 import QtGui

    from kvmon.app.servers import server_session
    from kvmon.gui import theme
    from kvmon.gui.app import build_window
    from kvmon.gui.settings import Settings

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{s.getsockname()[1]}"
    s.close()
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        from kvmon.cli import main

        assert main(["once", url, "--json"]) == 2
    verdict = json.loads(out.getvalue())["verdict"]
    assert verdict["level"] == "critical" and verdict["state"] == "Unreachable"
    assert verdict["sentence"] == (f"Cannot connect to {url} (Connection refused). Is the server running? kvmon once "
                                   "--list finds the servers on this machine")
    assert err.getvalue() == f"kvmon: {verdict['sentence']}\n"
    session = server_session(url, api_key=None, timeout_s=1.0, log_path=None)
    win, poller = build_window(session, Settings(str(tmp_path / "s.ini")), 3600.0, tray=False)
    try:
        win.resize(1280, 800)
        win.show()
        poller.start()
        deadline = time.monotonic() + 20
        while win.last is None and time.monotonic() < deadline:
            qapp.processEvents()
            time.sleep(0.01)
        qapp.processEvents()
        h = win.header
        assert h.headline.whole() == verdict["sentence"]
        assert h.headline.palette().color(QtGui.QPalette.ColorRole.WindowText).name() == theme.hex_color("critical")
        assert h.speed.whole() == "— tok/s" and h.efficiency.whole() == "no reply measured yet"
        assert win.alerts.text().startswith("Server gone — reconnecting: cannot connect to")
    finally:
        poller.stop()
        win.close()
        win.deleteLater()
        session.close()
        qapp.processEvents()
