"""The poll's HTTP reader: the plain answer read by the fast path and every other answer by h11 give one answer.

Real llama-server answers (the captures' heads and bodies) and bent ones are served by a raw TCP server on
127.0.0.1; what ``Wire`` returns is compared with what h11 alone reads from the same bytes.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import h11
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvmon.sources import wire
from kvmon.sources.wire import Answer, Dropped, Garbled, TimedOut, TooLarge, Wire

CAPTURES = Path(__file__).resolve().parent / "fixtures" / "llama-server"  # real answers of llama-server b11549


def h11_reads(raw: bytes, method: str = "GET") -> Answer:
    """What h11 alone makes of an answer's bytes (the connection closing after them)."""
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method=method, target="/x", headers=[("Host", "h")]))
    conn.send(h11.EndOfMessage())
    conn.receive_data(raw)
    conn.receive_data(b"")
    status, headers, parts = 0, {}, []
    while True:
        ev = conn.next_event()
        if isinstance(ev, h11.Response):
            status = ev.status_code
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in ev.headers}
        elif isinstance(ev, h11.Data):
            parts.append(bytes(ev.data))
        elif isinstance(ev, h11.EndOfMessage | h11.ConnectionClosed):
            break
    return Answer(status, headers, b"".join(parts))


class Scripted:
    """A TCP server answering each request on a connection with the next raw answer (then closing or not)."""

    def __init__(self, answers: list[bytes], close_after: bool = False) -> None:
        self.answers, self.close_after = answers, close_after
        self.connections = 0
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(8)
        self.port = self._sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        n = 0
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                buf = b""
                while True:
                    while b"\r\n\r\n" not in buf:
                        data = conn.recv(65536)
                        if not data:
                            break
                        buf += data
                    if b"\r\n\r\n" not in buf:
                        break
                    _req, buf = buf.split(b"\r\n\r\n", 1)
                    conn.sendall(self.answers[min(n, len(self.answers) - 1)])
                    n += 1
                    if self.close_after:
                        break

    def close(self) -> None:
        self._sock.close()


@pytest.fixture
def scripted() -> Iterator[type[Scripted]]:
    made: list[Scripted] = []

    class Made(Scripted):
        def __init__(self, *a: object, **k: object) -> None:
            super().__init__(*a, **k)  # type: ignore[arg-type]
            made.append(self)

    yield Made
    for s in made:
        s.close()


def ask(port: int, raw_method: str = "GET", deadline_s: float = 2.0, cap: int = 1 << 20) -> Answer:
    w = Wire("http", "127.0.0.1", port)
    try:
        return w.request(raw_method, "/x", deadline=time.monotonic() + deadline_s, max_body_bytes=cap)
    finally:
        w.close()


def _captured() -> list[tuple[str, bytes]]:
    out = []
    for head in sorted(CAPTURES.rglob("*.headers.txt")):
        body_file = head.with_name(head.name.removesuffix(".headers.txt"))
        if not body_file.is_file() or "sse" in body_file.name or "stream" in body_file.name:
            continue
        lines = [ln for ln in head.read_text().splitlines() if ln.strip()]
        out.append((body_file.name, ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body_file.read_bytes()))
    return out


CAPTURED = _captured()


def test_there_are_captured_answers_to_read() -> None:
    assert len(CAPTURED) >= 10


@pytest.mark.parametrize(("name", "raw"), CAPTURED, ids=[n for n, _r in CAPTURED])
def test_a_real_llama_server_answer_reads_on_the_fast_path_as_h11_reads_it(scripted: type[Scripted], name: str,
                                                                           raw: bytes) -> None:
    head = raw.split(b"\r\n\r\n", 1)[0]
    assert wire._Head.read(head) is not None, f"{name}: a plain answer should take the fast path"
    assert ask(scripted([raw]).port) == h11_reads(raw)


BENT = {
    "chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    "close-delimited": b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\nuntil the end",
    "http/1.0": b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
    "folded header": b"HTTP/1.1 200 OK\r\nX-A: one\r\n two\r\nContent-Length: 2\r\n\r\nok",
    "no reason phrase": b"HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nok",
    "upper-case names": b"HTTP/1.1 200 OK\r\nCONTENT-LENGTH: 2\r\nCONTENT-TYPE: x\r\n\r\nok",
    "spaces around value": b"HTTP/1.1 200 OK\r\nContent-Length:    2   \r\n\r\nok",
    "204 with a length": b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
    "100 first": b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    "same length twice": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
    "503 loading": b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 75\r\n\r\n"
                   b'{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}',
}


@pytest.mark.parametrize("name", sorted(BENT))
def test_every_other_answer_reads_as_h11_reads_it(scripted: type[Scripted], name: str) -> None:
    raw = BENT[name]
    assert ask(scripted([raw], close_after=True).port) == h11_reads(raw)


@pytest.mark.parametrize("raw", [
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",  # two lengths
    b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
    b"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n",
    b"SSH-2.0-OpenSSH_9.2\r\n\r\n",
])
def test_an_answer_that_is_not_http_is_garbled(scripted: type[Scripted], raw: bytes) -> None:
    with pytest.raises(Garbled):
        ask(scripted([raw], close_after=True).port)


def test_a_body_cut_short_is_dropped_on_both_paths(scripted: type[Scripted]) -> None:
    with pytest.raises(Dropped):
        ask(scripted([b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"partial\":"], close_after=True).port)
    with pytest.raises(Dropped):
        ask(scripted([b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n50\r\nabc"], close_after=True).port)


def test_a_body_over_the_cap_is_not_read(scripted: type[Scripted]) -> None:
    with pytest.raises(TooLarge):
        ask(scripted([b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n" + b"x" * 5000]).port, cap=1000)
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1388\r\n" + b"x" * 5000 + b"\r\n0\r\n\r\n"
    with pytest.raises(TooLarge):
        ask(scripted([chunked]).port, cap=1000)


def test_a_head_dripped_past_the_deadline_times_out(scripted: type[Scripted]) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def drip() -> None:
        conn, _ = srv.accept()
        with conn:
            conn.recv(65536)
            for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 100:
                time.sleep(0.05)
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return

    threading.Thread(target=drip, daemon=True).start()
    t0 = time.monotonic()
    with pytest.raises(TimedOut):
        ask(srv.getsockname()[1], deadline_s=0.4)
    assert time.monotonic() - t0 < 1.5
    srv.close()


def test_the_connection_is_kept_and_reopened_when_the_server_ends_it(scripted: type[Scripted]) -> None:
    plain = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nKeep-Alive: timeout=5, max=100\r\n\r\nok"
    srv = scripted([plain])
    w = Wire("http", "127.0.0.1", srv.port)
    for _ in range(4):
        assert w.request("GET", "/x", deadline=time.monotonic() + 2).body == b"ok"
    assert srv.connections == 1
    ending = scripted([b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"], close_after=True)
    w2 = Wire("http", "127.0.0.1", ending.port)
    for _ in range(3):
        assert w2.request("GET", "/x", deadline=time.monotonic() + 2).body == b"ok"
    assert ending.connections == 3
    w.close()
    w2.close()


_names = st.sampled_from(["Content-Type", "Server", "X-Thing", "Keep-Alive", "Access-Control-Allow-Origin"])
_values = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=20)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(headers=st.lists(st.tuples(_names, _values), max_size=6), body=st.binary(max_size=300),
       chunked=st.booleans(), ws=st.sampled_from(["", " ", "  ", "\t"]))
def test_generated_answers_read_alike_on_both_paths(scripted: type[Scripted], headers: list[tuple[str, str]],
                                                    body: bytes, chunked: bool, ws: str) -> None:
    lines = [f"{k}:{ws}{v}{ws}" for k, v in headers]
    if chunked:
        lines.append("Transfer-Encoding: chunked")
        payload = (f"{len(body):x}\r\n".encode() + body + b"\r\n" if body else b"") + b"0\r\n\r\n"
    else:
        lines.append(f"Content-Length:{ws}{len(body)}")
        payload = body
    raw = ("HTTP/1.1 200 OK\r\n" + "".join(ln + "\r\n" for ln in lines) + "\r\n").encode("latin-1") + payload
    assert ask(scripted([raw], close_after=True).port) == h11_reads(raw)
