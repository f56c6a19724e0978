"""``kvmon serve`` under hostile servers and load: a real listen backlog, scrapes that never fail on odd values,
a warning when other machines can scrape, and detection retried instead of giving up.
"""

from __future__ import annotations

import argparse
import io
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from helpers_hostile import RawServer, drip_head, listen_backlog
from helpers_http import LLAMA_FIXTURES, CannedResponse, FixtureServer, serve_llama_state, wait_until
from ollama_fixture import OllamaFixture
from prometheus_client.parser import text_string_to_metric_families

from kvmon.app.build import open_monitor
from kvmon.cli.serve import INTERVAL_ENV, Exporter, run


def _args(url: str | None, listen: str, timeout: float = 1.0) -> argparse.Namespace:
    return argparse.Namespace(url=url, api_key=None, log=None, timeout=timeout, listen=listen)


class Serving:
    """``run()`` on a thread until the test ends; ``exporter`` once it listens."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.err = io.StringIO()
        self.stop = threading.Event()
        self.ready: list[Exporter] = []
        self.result: list[int] = []
        self.thread = threading.Thread(target=lambda: self.result.append(
            run(args, err=self.err, stop=self.stop, on_ready=self.ready.append)), daemon=True)
        self.thread.start()

    @property
    def exporter(self) -> Exporter | None:
        return self.ready[0] if self.ready else None

    def scrape(self) -> str:
        assert self.exporter is not None and self.exporter.metrics_url
        return httpx.get(self.exporter.metrics_url.replace("0.0.0.0", "127.0.0.1"), timeout=5).text

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)


@pytest.fixture
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(INTERVAL_ENV, "0.2")
    yield


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


# ------------------------------------------------------------------------------------------------ 10


@pytest.mark.skipif(listen_backlog(socket.socket()) is None and not hasattr(socket, "TCP_INFO"),
                    reason="the backlog is read with Linux TCP_INFO")
def test_the_exporter_listens_with_a_real_backlog() -> None:
    exporter = Exporter()
    exporter.listen("127.0.0.1", 0)
    try:
        backlog = listen_backlog(exporter.socket)
    finally:
        exporter.stop()
    try:
        with open("/proc/sys/net/core/somaxconn") as fh:
            cap = int(fh.read())
    except OSError:
        cap = 128
    assert backlog is not None and backlog >= min(128, cap), backlog


# ------------------------------------------------------------------------------------------------ 3, 4


@pytest.mark.parametrize(("field", "value"), [("model_alias", "m\ud800x"), ("total_slots", int("9" * 400))],
                         ids=["lone-surrogate", "400-digits"])
def test_an_odd_value_never_makes_a_scrape_fail(field: str, value: Any) -> None:
    server = FixtureServer()
    serve_llama_state(server, "generating")
    props = json.loads((LLAMA_FIXTURES / "props.generating.json").read_text())
    props[field] = value
    server.set("/props", 200, json.dumps(props))
    monitor = open_monitor(server.url, timeout_s=1.0, gpu=False, host=False)
    exporter = Exporter(monitor)
    exporter.listen("127.0.0.1", 0)
    try:
        exporter.poll_once()
        assert exporter.metrics_url is not None
        resp = httpx.get(exporter.metrics_url, timeout=5)
    finally:
        exporter.stop()
        monitor.close()
        server.stop()
    assert resp.status_code == 200
    samples = _samples(resp.text)
    assert samples["kvmon_up"][0][1] == 1
    if field == "model_alias":
        assert samples["kvmon_model_info"][0][0]["model"] == "m\ufffdx"


# ------------------------------------------------------------------------------------------------ 1 (serve)


def test_serve_polls_a_server_that_drips_its_head(fast_polls: None) -> None:
    with RawServer(drip_head(0.1)) as server:
        serving = Serving(_args(server.url, "127.0.0.1:0", timeout=0.5))
        try:
            assert wait_until(lambda: serving.exporter is not None and serving.exporter.state.polls >= 1, 15), (
                "serve made no poll in 15 s of a server dripping its head (deadline 0.5 s)")
            up = _samples(serving.scrape())["kvmon_up"]
            assert up[0][1] == 0 and up[0][0]["status"] == "timeout"
        finally:
            serving.close()


# ------------------------------------------------------------------------------------------------ 16


def test_serve_beyond_loopback_warns(fast_polls: None) -> None:
    server = FixtureServer()
    serve_llama_state(server, "idle")
    serving = Serving(_args(server.url, "0.0.0.0:0"))
    try:
        assert wait_until(lambda: serving.exporter is not None, 10)
    finally:
        serving.close()
        server.stop()
    said = serving.err.getvalue()
    assert "0.0.0.0" in said and "other machines" in said


@pytest.mark.parametrize("bad", [CannedResponse(500, b'{"error":"internal"}'), CannedResponse(200, b"<html>oops")],
                         ids=["http-500", "not-json"])
def test_serve_retries_detection_after_a_bad_version_answer(fast_polls: None, bad: CannedResponse) -> None:
    ollama = OllamaFixture()
    good = (200, (LLAMA_FIXTURES.parent / "ollama" / "version.json").read_bytes())
    ollama.set("/api/version", bad.status, bad.body)
    serving = Serving(_args(ollama.url, "127.0.0.1:0"))
    try:
        assert wait_until(lambda: serving.exporter is not None, 10), serving.err.getvalue()
        time.sleep(0.5)
        assert not serving.result, f"serve gave up: {serving.err.getvalue()}"
        ollama.set("/api/version", *good)

        def reads_ollama() -> bool:
            up = _samples(serving.scrape()).get("kvmon_up", [])
            return bool(up) and up[0][1] == 1 and up[0][0].get("backend") == "ollama"

        assert wait_until(reads_ollama, 15), serving.scrape()
    finally:
        serving.close()
        ollama.stop()
    assert serving.result == [0]
