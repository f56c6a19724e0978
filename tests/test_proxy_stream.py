"""kvmon proxy end to end over real sockets: bytes in = bytes out per chunk, measurements, bad input."""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import json
import os
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import h11
import pytest
from helpers_http import wait_until

from kvmon.cli.proxy import parse_listen
from kvmon.proxy.framing import MessageReader, ProtocolError
from kvmon.proxy.meter import Meter
from kvmon.proxy.server import ProxyServer
from kvmon.proxy.stats import CACHED_PROMPT_REASON

FIX = Path(__file__).resolve().parent / "fixtures"
OLLAMA = FIX / "ollama"
LLAMA = FIX / "llama-server"


def chunk(payload: bytes) -> bytes:
    return f"{len(payload):x}\r\n".encode() + payload + b"\r\n"


@dataclass
class Script:
    """A raw HTTP answer: pieces written one by one; a gate makes the server wait for the test between pieces."""

    pieces: list[bytes]
    gated: bool = False
    delay_s: float = 0.0
    close_after: bool = False


@dataclass
class Upstream:
    """A raw-socket HTTP/1.1 server: records each request's bytes, answers a scripted byte sequence."""

    routes: dict[str, Callable[[bytes], Script]] = field(default_factory=dict)
    requests: list[tuple[str, bytes, bytes]] = field(default_factory=list)  # (path, head, body)
    written: dict[int, bytearray] = field(default_factory=dict)  # request number -> bytes sent
    gate: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    write_failed: threading.Event = field(default_factory=threading.Event)
    version: str | None = "0.33.0"

    def __post_init__(self) -> None:
        owner = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                sock: socket.socket = self.request
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                f = sock.makefile("rb")
                while True:
                    head = b""
                    while not head.endswith(b"\r\n\r\n"):
                        line = f.readline()
                        if not line:
                            return
                        head += line
                    lines = head.decode("latin-1").split("\r\n")
                    path = lines[0].split(" ")[1]
                    length = 0
                    for h in lines[1:]:
                        if h.lower().startswith("content-length:"):
                            length = int(h.split(":", 1)[1])
                    body = f.read(length) if length else b""
                    if path == "/api/version":
                        if owner.version is None:
                            data = b'{"error":{"code":404,"message":"File Not Found"}}'
                            status = "404 Not Found"
                        else:
                            data, status = json.dumps({"version": owner.version}).encode(), "200 OK"
                        sock.sendall(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
                                     f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
                        continue
                    with lock:
                        owner.requests.append((path, head, body))
                        n = len(owner.requests)
                        owner.written[n] = bytearray()
                    script = owner.routes[path](body)
                    try:
                        for i, piece in enumerate(script.pieces):
                            if script.gated and i > 1:
                                if not owner.gate.acquire(timeout=10):
                                    return
                            elif script.delay_s and i > 1:
                                time.sleep(script.delay_s)
                            sock.sendall(piece)
                            owner.written[n] += piece
                    except OSError:
                        owner.write_failed.set()
                        return
                    if script.close_after:
                        sock.shutdown(socket.SHUT_WR)
                        return

        lock = threading.Lock()
        class Server(socketserver.ThreadingTCPServer):
            allow_reuse_address = True
            request_queue_size = socket.SOMAXCONN  # as Ollama's listen backlog: not the 5 of Python's

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def chunked_answer(lines: list[bytes], content_type: str, *, gated: bool = False, delay_s: float = 0.0) -> Script:
    head = (f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nDate: Mon, 30 Nov 2026 18:37:10 GMT\r\n"
            "Transfer-Encoding: chunked\r\n\r\n").encode()
    return Script([head, *[chunk(x) for x in lines], b"0\r\n\r\n"], gated=gated, delay_s=delay_s)


def ndjson_lines(name: str) -> list[bytes]:
    return [line + b"\n" for line in (OLLAMA / name).read_bytes().splitlines() if line]


def sse_events(path: Path) -> list[bytes]:
    return [e + b"\n\n" for e in path.read_bytes().split(b"\n\n") if e.strip()]


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    up = Upstream()
    try:
        yield up
    finally:
        up.stop()


@pytest.fixture
def proxy(upstream: Upstream) -> Iterator[ProxyServer]:
    p = ProxyServer(upstream.url, port=0)
    p.start()
    assert wait_until(lambda: p.upstream_version is not None, 5)
    try:
        yield p
    finally:
        p.stop()


def post_raw(url: str, path: str, body: bytes, extra: str = "") -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    s = socket.create_connection((host, int(port)), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(body)}\r\n{extra}\r\n".encode() + body)
    return s


def recv_exact(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        data = s.recv(n - len(out))
        if not data:
            break
        out += data
    return out


def recv_all(s: socket.socket) -> bytes:
    out = b""
    while data := s.recv(65536):
        out += data
    return out


def get_stats(p: ProxyServer) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", p.port, timeout=5)
    conn.request("GET", "/kvmon/stats")
    resp = conn.getresponse()
    assert resp.status == 200
    doc = json.loads(resp.read())
    conn.close()
    return doc


# ------------------------------------------------------------------------------------------- end to end


def test_stream_passes_byte_for_byte_chunk_by_chunk(upstream: Upstream, proxy: ProxyServer) -> None:
    lines = ndjson_lines("chat.stream.ndjson")
    answer = chunked_answer(lines, "application/x-ndjson", gated=True)
    upstream.routes["/api/chat"] = lambda body: answer
    request_body = b'{"model":"llama3.1:8b","messages":[{"role":"user","content":"why is the sky blue?"}]}'
    s = post_raw(proxy.url, "/api/chat", request_body)
    try:
        # head and first chunk come ungated; every later chunk only after the previous one reached us
        got = recv_exact(s, len(answer.pieces[0]) + len(answer.pieces[1]))
        assert got == answer.pieces[0] + answer.pieces[1]
        for i, piece in enumerate(answer.pieces[2:], start=2):
            upstream.gate.release()
            got = recv_exact(s, len(piece))
            assert got == piece, f"chunk {i} altered or merged"
            if i == 4:  # mid-stream: the proxy shows the stream in flight with its token count
                live = get_stats(proxy)["in_flight"]
                assert len(live) == 1 and live[0]["tokens_so_far"] == 4 and live[0]["model"] == "llama3.1:8b"
    finally:
        s.close()
    path, head, body = upstream.requests[0]
    assert path == "/api/chat" and body == request_body
    assert head.startswith(b"POST /api/chat HTTP/1.1\r\n") and b"Host: 127.0.0.1:" in head  # head forwarded as sent
    assert wait_until(lambda: get_stats(proxy)["recent"], 5)
    rec = get_stats(proxy)["recent"][-1]
    assert rec["stats_source"] == "ollama" and rec["model"] == "llama3.1:8b" and not rec["aborted"]
    assert rec["chunks"] == 9 and rec["predicted_tokens"] == 9
    assert rec["decode_tok_s"] == pytest.approx(9 / 0.225) and rec["decode_tok_s_source"] == "server"
    # Ollama 0.33 counts cached prompt tokens without their time: no inflated prefill rate
    assert rec["prompt_tokens"] == 26 and rec["prompt_tok_s"] is None
    assert rec["prompt_tok_s_reason"] == CACHED_PROMPT_REASON
    assert rec["context_tokens"] == 26 + 9


def test_old_ollama_prefill_rate_is_reported() -> None:
    up = Upstream(version="0.9.6")
    p = ProxyServer(up.url, port=0)
    p.start()
    try:
        assert wait_until(lambda: p.upstream_version == "0.9.6", 5)
        up.routes["/api/generate"] = lambda body: chunked_answer(ndjson_lines("generate.stream.ndjson"),
                                                                 "application/x-ndjson")
        s = post_raw(p.url, "/api/generate", b'{"model":"llama3.1:8b","prompt":"hi"}', "Connection: close\r\n")
        recv_all(s)
        s.close()
        assert wait_until(lambda: get_stats(p)["recent"], 5)
        rec = get_stats(p)["recent"][-1]
        assert rec["prompt_tok_s"] == pytest.approx(1200 / 0.04) and rec["prompt_tok_s_reason"] is None
        assert rec["context_tokens"] is None  # before 0.30 the count excludes cached tokens: depth unknown
    finally:
        p.stop()
        up.stop()


def test_llama_server_sse_timings_and_openai_usage(upstream: Upstream, proxy: ProxyServer) -> None:
    events = sse_events(LLAMA / "completion.stream.sse.txt")
    upstream.routes["/completion"] = lambda body: chunked_answer(events, "text/event-stream")
    upstream.routes["/v1/chat/completions"] = lambda body: chunked_answer(
        sse_events(OLLAMA / "v1-chat.stream.sse.txt"), "text/event-stream")
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
    conn.request("POST", "/completion", body=b'{"prompt":"x","stream":true}')
    body1 = conn.getresponse().read()
    conn.request("POST", "/v1/chat/completions", body=b'{"model":"llama3.1:8b","stream":true}')  # same connection
    body2 = conn.getresponse().read()
    conn.close()
    assert body1 == b"".join(events)
    assert body2 == (OLLAMA / "v1-chat.stream.sse.txt").read_bytes()
    assert wait_until(lambda: len(get_stats(proxy)["recent"]) == 2, 5)
    r1, r2 = get_stats(proxy)["recent"]
    with_content = sum(1 for e in events if b'"content":""' not in e and b'"content":' in e)
    assert r1["stats_source"] == "llama-server" and r1["chunks"] == with_content
    assert r1["predicted_tokens"] == 64 and r1["decode_tok_s"] == pytest.approx(64 / 0.032752)
    assert r1["prompt_tokens"] == 1 and r1["cached_tokens"] == 34 and r1["context_tokens"] == 34 + 1 + 64
    assert r2["stats_source"] == "openai_usage" and r2["predicted_tokens"] == 3 and r2["chunks"] == 3
    assert r2["prompt_tok_s"] is None and r2["context_tokens"] == 29  # Ollama 0.33: usage counts cached tokens


def test_malformed_upstream_chunks_pass_untouched(upstream: Upstream, proxy: ProxyServer) -> None:
    final = ndjson_lines("chat.stream.ndjson")[-1]
    lines = [b'{"message":{"content":"a"},"done":false}\n{not json at all\n', b"\xff\xfe binary junk\n",
             b'{"message":{"content":"b"},', b'"done":false}\n', b"[1,2,3]\n", final]
    upstream.routes["/api/chat"] = lambda body: chunked_answer(lines, "application/x-ndjson")
    s = post_raw(proxy.url, "/api/chat", b"{}", "Connection: close\r\n")
    got = recv_all(s)
    s.close()
    assert got == b"".join(chunked_answer(lines, "application/x-ndjson").pieces)
    assert wait_until(lambda: get_stats(proxy)["recent"], 5)
    rec = get_stats(proxy)["recent"][-1]
    assert rec["chunks"] == 2 and rec["unparsed_lines"] == 3 and rec["stats_source"] == "ollama"


def test_broken_chunk_framing_is_relayed_then_closed(upstream: Upstream, proxy: ProxyServer) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"
    pieces = [head, chunk(b'{"done":false,"response":"x"}\n'), b"zz-not-hex\r\nrubbish", b"more rubbish"]
    upstream.routes["/api/generate"] = lambda body: Script(pieces, close_after=True)
    s = post_raw(proxy.url, "/api/generate", b"{}")
    got = recv_all(s)  # the proxy closes after the upstream does
    s.close()
    assert got == b"".join(pieces)


def test_large_bodies_both_ways(upstream: Upstream, proxy: ProxyServer) -> None:
    big = os.urandom(6 * 1024 * 1024)

    def echo(body: bytes) -> Script:
        return Script([f"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                       f"Content-Length: {len(body)}\r\n\r\n".encode(), body])

    upstream.routes["/api/blobs/sha256-x"] = echo
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
    conn.request("POST", "/api/blobs/sha256-x", body=big)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    assert resp.status == 200
    assert hashlib.sha256(upstream.requests[0][2]).digest() == hashlib.sha256(big).digest()
    assert hashlib.sha256(data).digest() == hashlib.sha256(big).digest()
    assert get_stats(proxy)["recent"] == []  # not a generation: counted in totals only
    assert get_stats(proxy)["totals"]["requests"] == 1


def test_close_delimited_body_and_head_request(upstream: Upstream, proxy: ProxyServer) -> None:
    body = b'{"model":"llama3.1:8b","response":"hi","done":true,"eval_count":5,"eval_duration":100000000}'
    raw = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n" + body
    upstream.routes["/api/generate"] = lambda b: Script([raw], close_after=True)
    s = post_raw(proxy.url, "/api/generate", b"{}")
    assert recv_all(s) == raw
    s.close()
    assert wait_until(lambda: get_stats(proxy)["recent"], 5)
    assert get_stats(proxy)["recent"][-1]["decode_tok_s"] == pytest.approx(50.0)


def test_upstream_down_gives_a_clear_502() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = s.getsockname()[1]
    s.close()
    p = ProxyServer(f"http://127.0.0.1:{dead}", port=0)
    p.start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", p.port, timeout=10)
        conn.request("POST", "/api/chat", body=b"{}")
        resp = conn.getresponse()
        doc = json.loads(resp.read())
        conn.close()
        assert resp.status == 502
        assert "cannot reach upstream" in doc["error"] and f"127.0.0.1:{dead}" in doc["error"]
        stats = get_stats(p)  # the proxy itself keeps answering
        assert stats["totals"]["upstream_errors"] == 1
    finally:
        p.stop()


def test_client_disconnect_mid_stream_reaches_upstream(upstream: Upstream, proxy: ProxyServer) -> None:
    many = [b'{"message":{"content":"x"},"done":false}\n'] * 400
    upstream.routes["/api/chat"] = lambda body: chunked_answer(many, "application/x-ndjson", delay_s=0.005)
    s = post_raw(proxy.url, "/api/chat", b'{"model":"llama3.1:8b"}')
    recv_exact(s, 300)
    s.close()
    assert upstream.write_failed.wait(10), "the upstream kept generating for a client that left"
    assert wait_until(lambda: get_stats(proxy)["recent"], 5)
    rec = get_stats(proxy)["recent"][-1]
    assert rec["aborted"] and rec["abort_reason"] == "client disconnected"
    assert get_stats(proxy)["in_flight"] == []
    # and the proxy serves the next client normally
    upstream.routes["/api/chat"] = lambda body: chunked_answer(ndjson_lines("chat.stream.ndjson"),
                                                               "application/x-ndjson")
    s = post_raw(proxy.url, "/api/chat", b"{}", "Connection: close\r\n")
    assert recv_all(s).endswith(b"0\r\n\r\n")
    s.close()


def test_upstream_dies_mid_response(upstream: Upstream, proxy: ProxyServer) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"
    pieces = [head, chunk(b'{"message":{"content":"x"},"done":false}\n')]
    upstream.routes["/api/chat"] = lambda body: Script(pieces, close_after=True)
    s = post_raw(proxy.url, "/api/chat", b"{}")
    got = recv_all(s)
    s.close()
    assert got == b"".join(pieces)  # what arrived is passed on; the client sees the truncation itself
    assert wait_until(lambda: get_stats(proxy)["recent"], 5)
    rec = get_stats(proxy)["recent"][-1]
    assert rec["aborted"] and "upstream closed" in rec["abort_reason"]


def test_concurrent_streams(upstream: Upstream, proxy: ProxyServer) -> None:
    lines = ndjson_lines("chat.stream.ndjson")
    upstream.routes["/api/chat"] = lambda body: chunked_answer(lines, "application/x-ndjson", delay_s=0.002)
    expected = b"".join(chunked_answer(lines, "application/x-ndjson").pieces)
    results: list[bytes] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        s = post_raw(proxy.url, "/api/chat", json.dumps({"model": f"m{i}"}).encode(), "Connection: close\r\n")
        got = recv_all(s)
        s.close()
        with lock:
            results.append(got)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert results == [expected] * 6
    assert wait_until(lambda: len(get_stats(proxy)["recent"]) == 6, 5)
    recent = get_stats(proxy)["recent"]
    assert sorted(r["model"] for r in recent) == [f"m{i}" for i in range(6)]  # each stream kept apart
    assert all(r["chunks"] == 9 and not r["aborted"] for r in recent)


def test_stats_path_is_not_forwarded_and_bad_requests_are_refused(upstream: Upstream, proxy: ProxyServer) -> None:
    doc = get_stats(proxy)
    assert doc["kvmon_proxy"] == 1 and doc["upstream"] == upstream.url and doc["upstream_kind"] == "ollama"
    assert upstream.requests == []
    s = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    s.sendall(b"THIS IS NOT HTTP\r\n\r\n")
    reply = recv_all(s)
    s.close()
    assert reply.startswith(b"HTTP/1.1 400 ")
    assert upstream.requests == []


def test_binds_loopback_by_default_and_parses_listen() -> None:
    assert ProxyServer().host == "127.0.0.1"
    assert parse_listen("127.0.0.1:11435") == ("127.0.0.1", 11435)
    assert parse_listen(":9000") == ("127.0.0.1", 9000)
    assert parse_listen("11436") == ("127.0.0.1", 11436)
    assert parse_listen("[::1]:11435") == ("::1", 11435)
    for bad in ("localhost", "host:port", "1.2.3.4:99999"):
        with pytest.raises(ValueError):
            parse_listen(bad)


def test_run_rejects_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from kvmon.cli.proxy import run

    assert run(argparse.Namespace(listen="nonsense", upstream="http://127.0.0.1:11434")) == 2
    assert run(argparse.Namespace(listen="127.0.0.1:0", upstream="ftp://x")) == 2
    assert run(argparse.Namespace(listen="127.0.0.1:0", upstream="http://user:pw@127.0.0.1:1")) == 2
    err = capsys.readouterr().err
    assert "kvmon proxy:" in err and "pw" not in err


# ------------------------------------------------------------------------------------------- pieces


def _read_all(raw: bytes, step: int, request: bool = False) -> tuple[bytes, bytes, bytes, bytes]:
    """(head, the body's raw bytes, its payload, what came after) as MessageReader reads ``raw`` fed ``step`` at
    a time."""
    async def go() -> tuple[bytes, bytes, bytes, bytes]:
        reader = asyncio.StreamReader()
        for i in range(0, len(raw), step):
            reader.feed_data(raw[i : i + step])
        reader.feed_eof()
        messages = MessageReader(reader)
        if request:
            head = await messages.request_head()
        else:
            messages.expect_response(h11.Request(method="GET", target="/", headers=[("Host", "x")]),
                                     request_sent=True)
            head = await messages.response_head()
        assert head is not None
        body, payload = b"", b""
        async for r, p in messages.body():
            body, payload = body + r, payload + p
        return head.raw, body, payload, messages.take_leftover()

    return asyncio.run(go())


def test_the_reader_follows_a_chunked_body_at_any_split() -> None:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    body = chunk(b"hello ") + chunk(b"world") + b"0\r\nTrailer: x\r\n\r\n"
    for step in (1, 2, 3, 7, 64, len(head + body)):
        got = _read_all(head + body + b"HTTP/1.1 200 OK\r\n", step)
        assert got == (head, body, b"hello world", b"HTTP/1.1 200 OK\r\n"), step  # raw kept, the rest left
    with pytest.raises(ProtocolError):
        _read_all(head + b"xyz\r\n", 4)
    with pytest.raises(ProtocolError):
        _read_all(head + b"2\r\nabXX", 4)


def test_the_reader_splits_pipelined_requests_exactly() -> None:
    first = b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n\r\n"
    second = b"GET /api/ps HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    for step in (1, 5, 200):
        assert _read_all(b"\r\n" + first + b"hello" + second, step, request=True) == (first, b"hello", b"hello",
                                                                                        second)


def test_meter_rate_leaves_out_the_tokens_that_came_at_once_with_the_first() -> None:
    """Tokens that reach the proxy together (an upstream or a network that buffers) were made before they came: the
    first burst starts the clock, and only the tokens after it count against the time since (10 a second here, not
    19 over one second)."""
    m = Meter(id=1, method="POST", path="/api/chat", started_unix=0.0, started_mono=0.0)
    m.set_response(200, "application/x-ndjson", None)
    line = b'{"message":{"content":"a"},"done":false}\n'
    m.feed(line * 9, 1.0)  # nine at once
    assert m.in_flight_rate() is None
    m.feed(line * 10, 2.0)
    assert m.in_flight_rate() == pytest.approx(10.0)


def test_meter_handles_huge_and_split_lines() -> None:
    m = Meter(id=1, method="POST", path="/api/chat", started_unix=0.0, started_mono=0.0)
    m.set_response(200, "application/x-ndjson", None)
    m.feed(b'{"message":{"content":"a"},"done":false}\n{"message":', 1.0)
    m.feed(b'{"content":"b"},"done":false}\n', 2.0)
    m.feed(b"x" * (2 * 1024 * 1024), 2.5)  # an endless line: skipped, not buffered
    m.feed(b"\n" + b'{"message":{"content":"c"},"done":false}', 3.0)
    m.finish_body(4.0)
    assert m.chunks == 3 and m.unparsed_lines == 1
    assert m.in_flight_rate() == pytest.approx(2 / 3.0)
    gz = Meter(id=2, method="POST", path="/api/chat", started_unix=0.0, started_mono=0.0)
    gz.set_response(200, "application/x-ndjson", "gzip")
    gz.feed(b'{"message":{"content":"a"},"done":false}\n', 1.0)
    assert gz.chunks == 0 and gz.format is None  # compressed bodies are relayed, not read


def test_kvmon_proxy_command_serves(upstream: Upstream) -> None:
    import subprocess
    import sys

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvmon", "proxy", "--listen", f"127.0.0.1:{port}", "--upstream", upstream.url],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(root)),
    )
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        assert f"http://127.0.0.1:{port}" in banner and upstream.url in banner
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/kvmon/stats")
        doc = json.loads(conn.getresponse().read())
        conn.close()
        assert doc["kvmon_proxy"] == 1 and doc["listen"] == f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def test_upstream_closing_an_idle_connection_is_not_an_error(upstream: Upstream, proxy: ProxyServer) -> None:
    body = b'{"version":"0.33.0"}'
    raw = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    upstream.routes["/api/tags"] = lambda b: Script([raw], close_after=True)  # keep-alive, then idle close
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=5)
    for _ in range(3):
        conn.request("GET", "/api/tags")
        resp = conn.getresponse()
        assert resp.status == 200 and resp.read() == body
        time.sleep(0.05)  # idle long enough for the upstream's close to arrive
    conn.close()
    assert get_stats(proxy)["totals"]["upstream_errors"] == 0
