"""On the real llama-server (b11549): a scripted agent whose system prompt carries a clock talks through ``kvmon
proxy``; kvmon names the divergence at its exact character, counts the prompt tokens read again exactly as the
server's own counters do, and says the miss. A client that reads slowly sees less than the server made."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from real_llama_server import RealLlamaServer

from kvmon.core.alert_types import AlertThresholds
from kvmon.core.analysis import Analyzer, AnalyzerSettings
from kvmon.proxy.server import ProxyServer
from kvmon.sources.llamacpp.source import LlamaServerSource

SYSTEM = ("It is 14:0{minute}:{second:02d} now. You are a coding agent working in a repository. Follow the "
          "instructions with care and report what you changed. Answer briefly.")
TASK = "Read the failing test and fix the function it tests. " * 4
COUNTERS = ("prompt_tokens_total", "prompt_tokens_cached_total")


def _counters(url: str) -> dict[str, float]:
    out = {}
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        for name in COUNTERS:
            if line.startswith(f"llamacpp:{name} "):
                out[name] = float(line.split()[1])
    return out


@pytest.fixture
def agent_setup(llama_server: Callable[..., RealLlamaServer]) -> Iterator[tuple[RealLlamaServer, ProxyServer]]:
    server = llama_server("llama", ["-c", "4096", "-np", "1", "--metrics"])
    proxy = ProxyServer(server.url, port=0)
    proxy.start()
    try:
        yield server, proxy
    finally:
        proxy.stop()


def test_a_clock_in_the_system_prompt_is_named_and_its_cost_counted_as_the_server_counts(
        agent_setup: tuple[RealLlamaServer, ProxyServer]) -> None:
    server, proxy = agent_setup
    source = LlamaServerSource(server.url, proxy_url=proxy.url)
    th = AlertThresholds(prompt_miss_min_tokens=200)  # the tiny model's prompts are a few hundred tokens
    analyzer = Analyzer(AnalyzerSettings(thresholds=th))
    try:
        analyzer.update(source.poll())
        before = _counters(server.url)
        history: list[dict[str, str]] = [{"role": "user", "content": TASK}]
        snaps = []
        with httpx.Client(base_url=proxy.url, timeout=60) as client:
            for turn in range(4):
                system = {"role": "system", "content": SYSTEM.format(minute=turn, second=7 * turn + 3)}
                reply = client.post("/v1/chat/completions", json={"messages": [system, *history], "max_tokens": 8,
                                                                   "temperature": 0}).json()
                history += [{"role": "assistant", "content": reply["choices"][0]["message"]["content"]},
                            {"role": "user", "content": f"Now step {turn + 2}."}]
                snaps.append(analyzer.update(source.poll()))
        after = _counters(server.url)
    finally:
        source.close()
    offset = SYSTEM.index("{minute}")  # "14:00:03" → "14:01:10": the minute's digit is the first to differ
    sentence = f"system message changed at character {offset} — looks like a time of day"
    doc = httpx.get(f"{proxy.url}/kvmon/stats").json()
    (change,) = doc["prompts"]["changes"]
    assert change["sentence"] == sentence and change["offset"] == offset and change["count"] == 3
    assert change["message_index"] == 0 and change["role"] == "system"
    # what kvmon counts as read again is what the server's own counters say, turn by turn and in all
    view = snaps[-1].prompt_cache
    assert view is not None and view.source == "the server's counters"
    assert view.reread_tokens == after["prompt_tokens_total"] - before["prompt_tokens_total"]
    assert view.reused_tokens == after["prompt_tokens_cached_total"] - before["prompt_tokens_cached_total"]
    recent = [r for r in doc["recent"] if r["prompt_reread_tokens"] is not None]
    assert change["reread_tokens"] == sum(r["prompt_reread_tokens"] for r in recent[1:])  # the three changed turns
    assert view.changes and view.changes[0].sentence == sentence
    # the miss, with its cause, where the conversation had been read before
    (alert,) = [a for a in snaps[-1].alerts if a.code == "prompt_cache_miss"]
    assert f"{sentence}; 3 times since" in alert.message and "keep the system prompt stable" in alert.message
    assert snaps[-1].verdict is not None and snaps[-1].verdict.sentence.endswith(f"— {sentence}")
    # and nothing of the prompts is in what kvmon publishes
    assert "coding agent" not in json.dumps(doc) and "failing test" not in json.dumps(doc)


def _slow_read(url: str, body: dict[str, object], pause_s: float) -> tuple[bytes, float]:
    """Send a streamed request on a socket with a small receive buffer, wait ``pause_s`` before reading, then read
    it all (a client busy rendering, say); the whole answer and how long it took."""
    host, port = url.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    t0 = time.monotonic()
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Connection: close\r\nContent-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    time.sleep(pause_s)
    got = bytearray()
    while chunk := sock.recv(4096):
        got += chunk
    sock.close()
    return bytes(got), time.monotonic() - t0


def test_a_client_that_reads_slowly_sees_less_than_the_server_made(
        agent_setup: tuple[RealLlamaServer, ProxyServer]) -> None:
    server, proxy = agent_setup
    body = {"messages": [{"role": "user", "content": "Count."}], "max_tokens": 3000, "stream": True,
            "ignore_eos": True, "temperature": 1.0}
    got, _took = _slow_read(proxy.url, body, pause_s=6.0)
    assert b"[DONE]" in got
    (rec,) = [r for r in httpx.get(f"{proxy.url}/kvmon/stats").json()["recent"] if r["predicted_tokens"]]
    assert rec["decode_tok_s_source"] == "server" and rec["client_tok_s"] is not None
    assert rec["client_tok_s"] < 0.6 * rec["decode_tok_s"], rec
    source = LlamaServerSource(server.url, proxy_url=proxy.url)
    try:
        s = Analyzer().update(source.poll())
    finally:
        source.close()
    (cause,) = [c for c in s.slowdown_causes if c.code == "client_slower"]
    assert cause.summary.startswith("your client receives ")


SECRET = "ZEBRA-QUARTZ-71"  # a word no model output, setting or number of kvmon's could hold


def test_no_prompt_text_reaches_a_recording_a_log_the_exporter_or_once(
        llama_server: Callable[..., RealLlamaServer], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import logging
    import os
    import subprocess
    import sys

    from prometheus_client import CollectorRegistry, generate_latest

    from kvmon.core.recorder import Recorder
    from kvmon.core.report_json import snapshot_to_json
    from kvmon.core.report_prometheus import snapshot_families

    caplog.set_level(logging.DEBUG)
    server = llama_server("llama", ["-c", "4096", "-np", "1", "--metrics"])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proxy = subprocess.Popen([sys.executable, "-m", "kvmon", "proxy", "--listen", f"127.0.0.1:{port}", "--upstream",
                              server.url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                httpx.get(f"{url}/kvmon/stats", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        source = LlamaServerSource(server.url, proxy_url=url)
        analyzer = Analyzer(AnalyzerSettings(thresholds=AlertThresholds(prompt_miss_min_tokens=100)))
        recording = tmp_path / "session.jsonl"
        snaps = []
        with Recorder(recording) as rec, httpx.Client(base_url=url, timeout=60) as client:
            for turn in range(3):
                system = {"role": "system", "content": f"Time {turn}:0{turn}. Codeword {SECRET}. Be brief."}
                user = {"role": "user", "content": f"Remember {SECRET} and say it back. " * 3}
                client.post("/v1/chat/completions", json={"messages": [system, user], "max_tokens": 4})
                snap = analyzer.update(source.poll())
                rec.record(snap)
                snaps.append(snap)
        source.close()
        stats_doc = httpx.get(f"{url}/kvmon/stats").text
    finally:
        proxy.terminate()
        out, err = proxy.communicate(timeout=10)
    assert snaps[-1].prompt_cache is not None and snaps[-1].prompt_cache.changes  # the prompts were compared

    class _Snap:
        def collect(self):  # type: ignore[no-untyped-def]
            return snapshot_families(snaps[-1])

    reg = CollectorRegistry()
    reg.register(_Snap())  # type: ignore[arg-type]
    places = {"the recording": recording.read_text(), "the proxy's output": out + err,
              "kvmon's log": caplog.text, "the exporter": generate_latest(reg).decode(),
              "once --json": json.dumps([snapshot_to_json(s) for s in snaps]), "the proxy's stats": stats_doc}
    for where, text in places.items():
        assert SECRET not in text and "Codeword" not in text and "say it back" not in text, where
