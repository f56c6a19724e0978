"""The sources' HTTP client over a raw TCP server on 127.0.0.1: one kept connection, reconnects, every answer a
real server sends read whole, bodies capped, one deadline whatever the server drips, and every failure typed.
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kvmon.core.readings import FailureKind, SourceError
from kvmon.sources.http import HttpClient

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llama-server"  # real answers of llama-server b11549

Answer = Callable[[socket.socket, bytes], bool]  # writes the answer to one request; False closes the connection


def ok(body: bytes = b'{"ok": true}', *, close: bool = False) -> Answer:
    def answer(conn: socket.socket, _request: bytes) -> bool:
        head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        conn.sendall((head + ("Connection: close\r\n" if close else "") + "\r\n").encode() + body)
        return not close
    return answer


class RawServer:
    """Accepts connections and answers each request with the next scripted answer (the last one repeats)."""

    def __init__(self, answers: list[Answer]) -> None:
        self.answers = answers
        self.connections = 0
        self.requests: list[bytes] = []
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(8)
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        buf = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buf:
                    try:
                        data = conn.recv(65536)
                    except OSError:
                        return
                    if not data:
                        return
                    buf += data
                request, buf = buf.split(b"\r\n\r\n", 1)
                self.requests.append(request)
                answer = self.answers[min(len(self.requests) - 1, len(self.answers) - 1)]
                if not answer(conn, request):
                    return

    def close(self) -> None:
        self._sock.close()


@pytest.fixture
def serve() -> Iterator[Callable[..., RawServer]]:
    servers: list[RawServer] = []

    def start(*answers: Answer) -> RawServer:
        servers.append(RawServer(list(answers) or [ok()]))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def test_polls_share_one_connection(serve: Callable[..., RawServer]) -> None:
    srv = serve(ok(b'{"n": 1}'))
    client = HttpClient(srv.url)
    for _ in range(5):
        assert client.get_json("/slots") == {"n": 1}
    client.close()
    assert srv.connections == 1 and len(srv.requests) == 5
    first = srv.requests[0].decode()
    assert first.startswith("GET /slots HTTP/1.1") and "user-agent: kvmon" in first.lower()


def test_query_and_body_reach_the_server(serve: Callable[..., RawServer]) -> None:
    srv = serve()
    client = HttpClient(srv.url)
    assert client.get_json("/props?model=a%2Fb") == {"ok": True}
    client.request("POST", "/api/show", json_body={"model": "m"})
    assert srv.requests[0].startswith(b"GET /props?model=a%2Fb HTTP/1.1")
    assert b"content-length: 13" in srv.requests[1].lower()


def test_a_closed_kept_connection_is_reopened_once(serve: Callable[..., RawServer]) -> None:
    def close_silently(conn: socket.socket, _request: bytes) -> bool:
        return False  # the server went away between polls (restart, idle timeout)

    srv = serve(ok(), close_silently, ok(b'{"again": true}'))
    client = HttpClient(srv.url)
    assert client.get_json("/a") == {"ok": True}
    assert client.get_json("/b") == {"again": True}  # no error: sent again on a new connection
    assert srv.connections == 2


def test_connection_close_answers_open_a_new_connection(serve: Callable[..., RawServer]) -> None:
    srv = serve(ok(close=True))
    client = HttpClient(srv.url)
    for _ in range(3):
        assert client.get_json("/x") == {"ok": True}
    assert srv.connections == 3


def raw(answer: bytes, *, close: bool = True) -> Answer:
    """Send these bytes as the answer (then close the connection, or keep it)."""
    def send(conn: socket.socket, _request: bytes) -> bool:
        conn.sendall(answer)
        return not close
    return send


def _captured() -> list[tuple[str, bytes, bytes]]:
    """(name, the whole answer as the server sent it, its body) for every captured answer with its head."""
    out = []
    for head in sorted(CAPTURES.rglob("*.headers.txt")):
        body_file = head.with_name(head.name.removesuffix(".headers.txt"))
        if not body_file.is_file() or "sse" in body_file.name or "stream" in body_file.name:
            continue
        lines = [ln for ln in head.read_text().splitlines() if ln.strip()]
        body = body_file.read_bytes()
        out.append((body_file.name, ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body, body))
    return out


CAPTURED = _captured()


def test_there_are_captured_answers_to_read() -> None:
    assert len(CAPTURED) >= 10


@pytest.mark.parametrize(("name", "answer", "body"), CAPTURED, ids=[n for n, _a, _b in CAPTURED])
def test_every_captured_llama_server_answer_reads_whole(serve: Callable[..., RawServer], name: str, answer: bytes,
                                                         body: bytes) -> None:
    client = HttpClient(serve(raw(answer, close=False)).url)
    try:
        got = client.get("/x")
        assert got.body == body and got.status_code == int(answer.split(b" ", 2)[1])
        assert got.headers.get("content-type") and got.headers["content-length"] == str(len(body))
    finally:
        client.close()


BENT = {  # what HTTP/1.1 allows beside the plain answer, and the body a reader must find in it
    "chunked": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
                b"hello world"),
    "close-delimited": (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\nuntil the end",
                        b"until the end"),
    "http/1.0": (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", b"ok"),
    "no reason phrase": (b"HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nok", b"ok"),
    "upper-case names": (b"HTTP/1.1 200 OK\r\nCONTENT-LENGTH: 2\r\nCONTENT-TYPE: x\r\n\r\nok", b"ok"),
    "spaces around value": (b"HTTP/1.1 200 OK\r\nContent-Length:    2   \r\n\r\nok", b"ok"),
    "204 with a length": (b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n", b""),
    "100 first": (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", b"ok"),
    "same length twice": (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok", b"ok"),
}


@pytest.mark.parametrize("name", sorted(BENT))
def test_every_other_framing_reads_its_body(serve: Callable[..., RawServer], name: str) -> None:
    answer, body = BENT[name]
    client = HttpClient(serve(raw(answer)).url)
    try:
        assert client.get("/x").body == body
    finally:
        client.close()


@pytest.mark.parametrize("answer", [
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",  # two lengths
    b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
    b"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n",
    b"SSH-2.0-OpenSSH_9.2\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n50\r\nabc",  # a chunked body cut short
])
def test_an_answer_that_is_not_http_or_cut_short_is_a_closed_connection(serve: Callable[..., RawServer],
                                                                        answer: bytes) -> None:
    client = HttpClient(serve(raw(answer)).url)
    try:
        with pytest.raises(SourceError) as e:
            client.get("/x")
    finally:
        client.close()
    assert e.value.failure.kind == FailureKind.UNREACHABLE and "closed the connection" in e.value.failure.reason


@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_over_the_cap_is_not_read_and_the_next_request_is_answered(serve: Callable[..., RawServer],
                                                                          chunked: bool) -> None:
    big = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1388\r\n" + b"x" * 5000 + b"\r\n0\r\n\r\n"
           if chunked else b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n" + b"x" * 5000)
    srv = serve(raw(big, close=False), ok())
    client = HttpClient(srv.url, max_body_bytes=1000)
    try:
        with pytest.raises(SourceError) as e:
            client.get("/big")
        assert e.value.failure.kind == FailureKind.UNEXPECTED_BODY and "/big body larger than" in e.value.failure.reason
        assert client.get_json("/next") == {"ok": True}  # the unread rest is not taken for the next answer
    finally:
        client.close()


def test_refused_is_unreachable() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(SourceError) as e:
        HttpClient(f"http://127.0.0.1:{port}").get("/health")
    assert e.value.failure.kind == FailureKind.UNREACHABLE
    assert "cannot connect" in e.value.failure.reason and "refused" in e.value.failure.reason.lower()


def test_unknown_host_is_unreachable() -> None:
    with pytest.raises(SourceError) as e:
        HttpClient("http://no-such-host.invalid:8080").get("/health")
    assert e.value.failure.kind == FailureKind.UNREACHABLE


def test_a_server_that_accepts_and_says_nothing_times_out(serve: Callable[..., RawServer]) -> None:
    def silent(conn: socket.socket, _request: bytes) -> bool:
        time.sleep(2.0)
        return False

    srv = serve(silent)
    t0 = time.monotonic()
    with pytest.raises(SourceError) as e:
        HttpClient(srv.url, timeout_s=0.3).get("/slots")
    assert e.value.failure.kind == FailureKind.TIMEOUT
    assert time.monotonic() - t0 < 1.5


def test_not_http_is_a_closed_connection(serve: Callable[..., RawServer]) -> None:
    def garbage(conn: socket.socket, _request: bytes) -> bool:
        conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")
        return False

    with pytest.raises(SourceError) as e:
        HttpClient(serve(garbage).url).get("/health")
    assert e.value.failure.kind == FailureKind.UNREACHABLE
    assert "closed the connection" in e.value.failure.reason


def test_a_body_cut_short_is_an_error_not_a_short_answer(serve: Callable[..., RawServer]) -> None:
    def short(conn: socket.socket, _request: bytes) -> bool:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"partial\":")
        return False

    client = HttpClient(serve(short).url)
    with pytest.raises(SourceError) as e:
        client.get("/slots")
    assert e.value.failure.kind == FailureKind.UNREACHABLE


def _self_signed(tmp: Path) -> tuple[Path, Path] | None:
    """A certificate for 127.0.0.1 and its key, made with the openssl command (None when it is not installed)."""
    if shutil.which("openssl") is None:
        return None
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


class TlsServer(RawServer):
    """The raw server behind TLS with a self-signed certificate."""

    def __init__(self, answers: list[Answer], cert: Path, key: Path) -> None:
        self._ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._ctx.load_cert_chain(cert, key)
        super().__init__(answers)
        self.url = f"https://127.0.0.1:{self.port}"

    def _connection(self, conn: socket.socket) -> None:
        try:
            tls = self._ctx.wrap_socket(conn, server_side=True)
        except (ssl.SSLError, OSError):
            conn.close()
            return
        super()._connection(tls)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    made = _self_signed(tmp_path_factory.mktemp("tls"))
    if made is None:
        pytest.skip("needs the openssl command to make a certificate")
    return made


def test_https_checks_certificates_and_keeps_the_deadline(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    server = TlsServer([ok()], cert, key)
    untrusting = HttpClient(server.url, timeout_s=2.0)
    with pytest.raises(SourceError) as e:
        untrusting.get("/slots")  # self-signed: refused by the default checks, as httpx would refuse it
    assert e.value.failure.kind == FailureKind.UNREACHABLE and "certificate" in e.value.failure.reason.lower()
    trusting = ssl.create_default_context(cafile=str(cert))
    client = HttpClient(server.url, timeout_s=2.0, tls=trusting)
    assert client.get_json("/slots") == {"ok": True}
    assert client.get_json("/slots") == {"ok": True} and server.connections <= 2  # kept over TLS too

    def drip(conn: socket.socket, _request: bytes) -> bool:
        for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 1000:
            time.sleep(0.05)
            try:
                conn.sendall(bytes([byte]))
            except OSError:  # the client gave up, as it should
                return False
        return False

    slow = TlsServer([drip], cert, key)
    client = HttpClient(slow.url, timeout_s=0.5, tls=trusting)
    t0 = time.monotonic()
    try:
        with pytest.raises(SourceError) as e:
            client.get("/slots")
        assert e.value.failure.kind == FailureKind.TIMEOUT and time.monotonic() - t0 < 3.0
    finally:
        client.close()
        server.close()
        slow.close()


def test_a_head_dripped_past_the_deadline_times_out(serve: Callable[..., RawServer]) -> None:
    def drip(conn: socket.socket, _request: bytes) -> bool:
        for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 100:
            time.sleep(0.05)
            try:
                conn.sendall(bytes([byte]))
            except OSError:  # the client gave up, as it should
                return False
        return False

    client = HttpClient(serve(drip).url, timeout_s=0.4)
    t0 = time.monotonic()
    try:
        with pytest.raises(SourceError) as e:
            client.get("/slots")
    finally:
        client.close()
    assert e.value.failure.kind == FailureKind.TIMEOUT and "/slots did not answer in time" in e.value.failure.reason
    assert time.monotonic() - t0 < 1.0


def test_a_body_trickled_past_the_deadline_times_out(serve: Callable[..., RawServer]) -> None:
    def trickle(conn: socket.socket, _request: bytes) -> bool:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
        for _ in range(1000):
            time.sleep(0.05)
            try:
                conn.sendall(b" ")
            except OSError:
                return False
        return False

    client = HttpClient(serve(trickle).url, timeout_s=0.4)
    t0 = time.monotonic()
    try:
        with pytest.raises(SourceError) as e:
            client.get("/metrics")
    finally:
        client.close()
    assert e.value.failure.kind == FailureKind.TIMEOUT and time.monotonic() - t0 < 1.0


def test_credentials_in_the_url_are_neither_sent_nor_shown(serve: Callable[..., RawServer]) -> None:
    srv = serve(ok())
    client = HttpClient(srv.url.replace("http://", "http://alice:s3cret@") + "/llm?token=s3cret")
    try:
        assert client.get_json("/slots") == {"ok": True}
    finally:
        client.close()
    assert srv.requests[0].startswith(b"GET /llm/slots HTTP/1.1") and b"s3cret" not in srv.requests[0]
    assert "s3cret" not in repr(client) and "s3cret" not in client.display_url


def test_other_schemes_are_a_bad_url() -> None:
    client = HttpClient("ftp://127.0.0.1:1")
    with pytest.raises(SourceError) as e:
        client.get("/x")
    assert e.value.failure.kind == FailureKind.BAD_URL


def test_a_latin1_api_key_is_sent_and_one_a_header_cannot_carry_is_a_clear_error(
        serve: Callable[..., RawServer]) -> None:
    srv = serve(ok())
    client = HttpClient(srv.url, api_key="clé")
    try:
        assert client.get_json("/slots") == {"ok": True}
    finally:
        client.close()
    assert "authorization: bearer cl\xe9".encode("latin-1") in srv.requests[0].lower()
    with pytest.raises(SourceError) as e:
        HttpClient(srv.url, api_key="鍵")
    assert e.value.failure.kind == FailureKind.BAD_URL and "API key cannot be sent" in e.value.failure.reason
    assert "鍵" not in e.value.failure.reason

