"""The whole live path for Ollama: a client streams through kvmon proxy, kvmon reads the proxy's measurements."""

from __future__ import annotations

import http.client
import json
import threading
import time

from helpers_http import wait_until
from ollama_fixture import OllamaFixture, fixture_bytes

from kvmon.app.monitor import Monitor
from kvmon.proxy.server import ProxyServer
from kvmon.sources.ollama.source import OllamaSource


def test_dashboard_sees_the_live_rate_through_the_proxy() -> None:
    ollama = OllamaFixture()
    tokens = [json.dumps({"model": "llama3.1:8b", "message": {"role": "assistant", "content": f" w{i}"},
                          "done": False}).encode() + b"\n" for i in range(60)]
    final = fixture_bytes("chat.stream.ndjson").splitlines()[-1] + b"\n"
    ollama.stream_lines = [*tokens, final]
    ollama.stream_delay_s = 0.02  # ≈ 50 tok/s, as the proxy will see it
    proxy = ProxyServer(ollama.url, port=0)
    proxy.start()
    received: list[bytes] = []

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=20)
        conn.request("POST", "/api/chat", body=b'{"model":"llama3.1:8b","messages":[]}')
        received.append(conn.getresponse().read())
        conn.close()

    src = OllamaSource(ollama.url, find_child=False, proxy_url=proxy.url, timeout_s=2.0)
    mon = Monitor(src)
    t = threading.Thread(target=client)
    try:
        assert wait_until(lambda: proxy.upstream_version == "0.33.0", 5)
        t.start()
        assert wait_until(lambda: proxy.stats()["in_flight"] and proxy.stats()["in_flight"][0]["chunks"] >= 3, 10)
        snaps = []
        for _ in range(3):
            snaps.append(mon.poll())
            time.sleep(0.25)
        live = [s for s in snaps if s.decode_tok_s is not None]
        assert live, [s.reasons.get("decode_tok_s") for s in snaps]
        assert src.poll().live_rate_source == "proxy"  # the reading says where the live rate came from
        assert 10 < live[-1].decode_tok_s < 80  # ~50 tok/s paced by the fake server on a busy machine
        t.join(20)
        assert received and received[0] == b"".join(ollama.stream_lines)
        after = mon.poll()
        assert after.decode_tok_s is None  # idle again: no data, not 0
        reading = src.poll()
        assert reading.last_request is not None and reading.last_request.predicted_tokens == 9
    finally:
        mon.close()
        proxy.stop()
        ollama.stop()
