"""One deadline per poll (``kvmon.core.deadline``, ``kvmon.sources.http``): every request of a poll shares it, so
a server that hangs costs a poll its timeout once however many requests it makes; what is left unasked says why;
an endpoint that hung is then asked with a short limit, so the rest of each reading goes on without it, and with
its whole time again now and then until it answers. Over real HTTP on 127.0.0.1.
"""

from __future__ import annotations

import threading
import time

import pytest
from helpers_hostile import RawServer, drip_head
from helpers_http import FixtureServer, serve_llama_state
from test_ollama_helpers import OllamaFixture

from kvmon.app.monitor import Monitor
from kvmon.core.deadline import current_deadline, poll_deadline
from kvmon.core.readings import FailureKind, SourceError
from kvmon.sources.http import HANG_LIMIT_MIN_S, HANG_RETRY_S, HANGS, HangMemory, HttpClient
from kvmon.sources.ollama.source import OllamaSource
from kvmon.sources.router.progress import ProgressStream


def test_scopes_nest_and_never_end_later_than_the_one_around_them() -> None:
    assert current_deadline() is None
    with poll_deadline(1.0) as outer:
        assert outer is not None and current_deadline() is outer
        with poll_deadline(5.0) as inner:
            assert inner is outer  # a longer one inside a shorter one: the shorter stands
        with poll_deadline(0.1) as sooner:
            assert sooner is not None and sooner is not outer and sooner.at < outer.at
        with poll_deadline(None) as none:
            assert none is outer
        assert current_deadline() is outer
    assert current_deadline() is None


def test_each_thread_has_its_own_poll() -> None:
    seen: list[object] = []
    with poll_deadline(1.0):
        t = threading.Thread(target=lambda: seen.append(current_deadline()))
        t.start()
        t.join()
    assert seen == [None]


def test_two_hanging_endpoints_cost_one_timeout_and_the_second_says_where_the_time_went(
        fixture_server: FixtureServer) -> None:
    for path in ("/a", "/b"):
        fixture_server.hang(path, 5.0)
    client = HttpClient(fixture_server.url, timeout_s=0.5)
    reasons = []
    t0 = time.monotonic()
    try:
        with poll_deadline(0.5):
            for path in ("/a", "/b"):
                with pytest.raises(SourceError) as e:
                    client.get(path)
                assert e.value.failure.kind is FailureKind.TIMEOUT
                reasons.append(e.value.failure.reason)
    finally:
        client.close()
    assert time.monotonic() - t0 < 0.9  # one timeout, not two
    assert "/a did not answer in time" in reasons[0]
    assert "/b not asked" in reasons[1] and "0.5 s went to waiting on" in reasons[1] and "/a" in reasons[1]


def test_no_client_waits_past_the_poll_even_with_a_longer_timeout_of_its_own() -> None:
    with RawServer(drip_head(0.05)) as server:
        client = HttpClient(server.url, timeout_s=10.0)
        t0 = time.monotonic()
        try:
            with poll_deadline(0.4), pytest.raises(SourceError):
                client.get("/dripped")
        finally:
            client.close()
    assert time.monotonic() - t0 < 1.0


def test_an_endpoint_that_hung_is_asked_with_a_short_limit_until_it_answers(fixture_server: FixtureServer) -> None:
    fixture_server.set("/x", 200, "{}")
    fixture_server.hang("/slow", 5.0)
    client = HttpClient(fixture_server.url, timeout_s=1.0)
    try:
        with pytest.raises(SourceError):
            client.get("/slow")  # had its whole time: it hung
        assert client.hangs("/slow") and not client.hangs("/x")
        t0 = time.monotonic()
        with pytest.raises(SourceError) as e:
            client.get("/slow")
        assert time.monotonic() - t0 < HANG_LIMIT_MIN_S + 0.3
        assert "it hung before" in e.value.failure.reason and f"{HANG_LIMIT_MIN_S:g} s limit" in e.value.failure.reason
        fixture_server.set("/slow", 200, '{"ok": true}')  # it answers again, within the short limit
        assert client.get_json("/slow") == {"ok": True}
        assert not client.hangs("/slow")
    finally:
        client.close()


def test_a_hung_endpoint_gets_its_whole_time_again_after_a_while_doubling_while_it_hangs() -> None:
    memory, key = HangMemory(), ("http://h:1", "/slots")
    assert memory.limit_s(key, 3.0, 100.0) is None
    memory.hung(key, 100.0)
    assert memory.limit_s(key, 3.0, 100.1) == pytest.approx(0.3)  # a tenth of the timeout, at least the minimum
    assert memory.limit_s(key, 1.0, 100.1) == HANG_LIMIT_MIN_S
    assert memory.limit_s(key, 3.0, 100.0 + HANG_RETRY_S[0]) is None  # its whole time again
    memory.hung(key, 105.0)
    assert memory.limit_s(key, 3.0, 105.0 + HANG_RETRY_S[0]) is not None  # twice as long before the next
    assert memory.limit_s(key, 3.0, 105.0 + 2 * HANG_RETRY_S[0]) is None
    for _ in range(10):
        memory.hung(key, 200.0)
    assert memory.limit_s(key, 3.0, 200.0 + HANG_RETRY_S[1]) is None  # never longer than the cap
    memory.answered(key)
    assert not memory.known(key)


def test_ollama_show_waits_no_longer_than_the_users_timeout() -> None:
    """``/api/show`` had a client of its own with at least 10 s: a hanging one held a poll 21 s at --timeout 3."""
    ollama = OllamaFixture()
    ollama.hang("/api/show", 30.0)
    src = OllamaSource(ollama.url, timeout_s=0.5, find_child=False, proxy_url=None)
    monitor = Monitor(src, timeout_s=0.5)
    try:
        t0 = time.monotonic()
        snap = monitor.poll()
        took = time.monotonic() - t0
    finally:
        monitor.close()
        ollama.stop()
        HANGS.answered((src.base_url, "/api/show"))
    assert took < 1.5, f"one poll took {took:.1f} s"
    assert snap.server_read and snap.model.name == "llama3.1:8b"  # /api/ps was read: the rest goes on
    shape = snap.reasons.get("shape", "")
    assert "/api/show" in shape and "did not answer in time" in shape, snap.reasons


def test_a_poll_in_which_nothing_answered_is_a_timeout_not_a_reading(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "generating")
    from kvmon.sources.llamacpp.source import LlamaServerSource

    monitor = Monitor(LlamaServerSource(fixture_server.url, timeout_s=0.5, inspect_local_process=False),
                      timeout_s=0.5)
    try:
        assert monitor.poll().server_read
        for path in ("/health", "/props", "/slots", "/metrics", "/v1/models"):
            fixture_server.hang(path, 5.0)
        for _ in range(3):  # each endpoint in turn hangs, then is asked with the short limit: never "connected"
            snap = monitor.poll()
            assert not snap.server_read and snap.connection.reason, snap.connection
    finally:
        monitor.close()


def test_the_event_stream_ends_at_once_whatever_the_server_sends() -> None:
    """A router's load progress is read on a thread; a stream whose head drips must not outlive its source."""
    with RawServer(drip_head(0.05)) as server:
        follower = ProgressStream(server.url + "/models/sse", timeout_s=5.0)
        follower.want(True)
        time.sleep(0.3)  # reading the dripped head
        t0 = time.monotonic()
        follower.close()
        took = time.monotonic() - t0
        thread = follower._thread
    assert took < 0.5 and thread is not None and not thread.is_alive()
