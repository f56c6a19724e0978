"""The simulated server takes a burst of clients as llama-server does: it listens with the system's backlog (Python's
is 5: past it a burst's connections were reset, and the proxy answered 502 to some of 100 streams at once), and a
hundred streams at once through ``kvmon proxy`` are all answered."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import pytest
from helpers_hostile import listen_backlog

from kvmon.proxy.server import ProxyServer
from kvmon.sim.server import SimServer

pytestmark = pytest.mark.slow


@pytest.fixture
def sim() -> Iterator[SimServer]:
    s = SimServer("seed-3090x2", speed=50.0, autoplay=False)
    s.start()
    try:
        yield s
    finally:
        s.stop()


def test_it_listens_with_the_systems_backlog(sim: SimServer) -> None:
    assert sim._httpd is not None
    backlog = listen_backlog(sim._httpd.socket)
    if backlog is None:
        pytest.skip("the backlog is read with Linux TCP_INFO")
    with open("/proc/sys/net/core/somaxconn") as fh:
        assert backlog >= min(128, int(fh.read()))


def test_a_hundred_concurrent_streams_through_the_proxy_are_all_answered(sim: SimServer) -> None:
    proxy = ProxyServer(sim.url, port=0, probe_version=False)
    proxy.start()
    statuses: list[int | str] = []
    lock = threading.Lock()
    start = threading.Barrier(100)

    def one() -> None:
        start.wait()
        try:
            with httpx.stream("POST", f"{proxy.url}/v1/chat/completions", timeout=60,
                              json={"messages": [{"role": "user", "content": "go"}], "max_tokens": 2,
                                    "stream": True}) as r:
                for _ in r.iter_bytes():
                    pass
                got: int | str = r.status_code
        except httpx.HTTPError as e:
            got = type(e).__name__
        with lock:
            statuses.append(got)

    threads = [threading.Thread(target=one) for _ in range(100)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
    finally:
        proxy.stop()
    assert len(statuses) == 100 and set(statuses) == {200}, sorted(map(str, statuses))
