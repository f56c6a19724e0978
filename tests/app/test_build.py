"""Opening a monitor for a URL: the backend detected or the first answering candidate picked, a bad URL and nothing
there refused with a hint."""

from __future__ import annotations

import pytest
from helpers_http import FixtureServer, closed_port_url, serve_llama_state

from kvmon.app.build import open_monitor
from kvmon.core.readings import FailureKind, SourceError
from kvmon.core.snapshot import ConnectionStatus


def test_open_monitor_detects_llama_server(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "idle")
    m = open_monitor(fixture_server.url, timeout_s=2.0, gpu=False, host=False)
    try:
        assert m.backend == "llama-server"
        assert m.poll().connection.status is ConnectionStatus.CONNECTED
    finally:
        m.close()


def test_open_monitor_auto_picks_the_first_answering_candidate(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "idle")
    m = open_monitor(None, timeout_s=1.0, gpu=False, host=False, candidates=(closed_port_url(), fixture_server.url))
    try:
        assert m.display_url == fixture_server.url
    finally:
        m.close()


def test_open_monitor_with_nothing_there_raises_unreachable() -> None:
    with pytest.raises(SourceError) as info:
        open_monitor(None, timeout_s=0.5, candidates=(closed_port_url(), closed_port_url()))
    assert info.value.failure.kind is FailureKind.UNREACHABLE
    assert "--demo" in info.value.failure.reason


def test_open_monitor_bad_url() -> None:
    with pytest.raises(SourceError) as info:
        open_monitor("ht!tp://", timeout_s=0.5)
    assert info.value.failure.kind is FailureKind.BAD_URL


def test_auto_detect_asks_the_server_once(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "idle")
    m = open_monitor(None, timeout_s=1.0, gpu=False, host=False, candidates=(fixture_server.url,))
    try:
        assert m.backend == "llama-server"
        assert fixture_server.paths_requested() == ["/props"]  # detection only; the source has not polled yet
    finally:
        m.close()


def test_nothing_there_is_unreachable_with_a_hint() -> None:
    with pytest.raises(SourceError) as info:
        open_monitor(None, timeout_s=0.5, candidates=(closed_port_url(),))
    assert info.value.failure.kind is FailureKind.UNREACHABLE
