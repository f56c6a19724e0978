"""The hostile matrix: every way a server can hang (``MODES``) on every endpoint kvmon asks, of every backend it
reads (``BACKENDS``), against ``kvmon once`` over real sockets on 127.0.0.1.

Each backend is a set of canned answers taken from the fixtures (real captures where there are some) on a raw TCP
server that speaks HTTP/1.1 with keep-alive; one endpoint, the case's target, misbehaves:

- ``hang``: the request is read, then nothing is sent (the connection stays open);
- ``slow_headers``: the response head comes one byte every ``DRIP_S``, never ending;
- ``trickle_body`` (slowloris): the head is whole and declares a long body, which comes one byte every ``DRIP_S``;
- ``accept_stall``: from the target's request on the server is wedged: that connection and every one accepted
  after it are held open, never read, never answered;
- ``drop_mid_answer``: the head is whole and half the body follows, then the connection closes (a server that
  died while answering).

``run_case`` runs ``kvmon once URL --timeout T --interval I --json`` (the command line's own parser and ``run``)
and returns how long it took, its exit status, the JSON document and the first line of stderr. Used by
``tests/test_hostile_matrix.py`` (fast form) and ``bench/hostile_matrix.py`` (every case, slowest per endpoint).
Test doubles only: every server and child process ends when its case ends.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent / "fixtures"
MODES = ("hang", "slow_headers", "trickle_body", "accept_stall", "drop_mid_answer")
DRIP_S = 0.1  # below any per-read timeout: only a deadline on the whole request ends these
REASONS = {200: "OK", 302: "Found", 404: "Not Found", 500: "Internal Server Error", 501: "Not Implemented",
           502: "Bad Gateway", 503: "Service Unavailable"}


# --------------------------------------------------------------------------------------------- the server


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = (("Content-Type", "application/json"),)
    stream: bool = False  # a server-sent-events stream: the body, then the connection stays open


NOT_FOUND = Answer(404, b'{"error":{"code":404,"message":"File Not Found","type":"not_found_error"}}')


def endpoint_of(target: str) -> str:
    """The endpoint a request asks: its path, with ``?model`` when a router's per-model query is on it."""
    path, _, query = target.partition("?")
    return path + ("?model" if "model=" in query else "")


class HostileServer:
    """Canned answers on 127.0.0.1 (``routes``: endpoint → Answer); the ``target`` endpoint misbehaves by ``mode``."""

    def __init__(self, routes: dict[str, Answer], target: str | None = None, mode: str | None = None,
                 port: int = 0) -> None:
        if mode is not None and mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}")
        self.routes = routes
        self.target = target
        self.mode = mode
        self.every: Answer | None = None  # when set, the answer to every request (a gateway whose server died)
        self.stopped = threading.Event()
        self.wedged = threading.Event()
        self.asked: list[str] = []
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", port))
        self._listener.listen(64)
        self._listener.settimeout(0.05)
        self._thread = threading.Thread(target=self._accept, daemon=True, name="hostile-accept")
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            with self._lock:
                self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True, name="hostile-conn").start()

    def _serve(self, sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            buf = b""
            while not self.stopped.is_set():
                if self.wedged.is_set():
                    self.stopped.wait()  # accepted, never read, never answered
                    return
                while b"\r\n\r\n" not in buf:
                    piece = sock.recv(65536)
                    if not piece:
                        return
                    buf += piece
                head, _, buf = buf.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target = [*lines[0].split(" "), "", ""][:2]
                length = 0
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value.strip() or 0)
                while len(buf) < length:
                    piece = sock.recv(65536)
                    if not piece:
                        return
                    buf += piece
                buf = buf[length:]
                endpoint = endpoint_of(target)
                with self._lock:
                    self.asked.append(f"{method} {target}")
                if self.wedged.is_set():
                    continue
                answer = self.every or self.routes.get(endpoint, NOT_FOUND)
                if endpoint == self.target and self.mode is not None:
                    self._misbehave(sock, answer)
                    return
                sock.sendall(_wire(answer))
                if answer.stream:
                    self.stopped.wait()
                    return

    def _misbehave(self, sock: socket.socket, answer: Answer) -> None:
        if self.mode == "accept_stall":
            self.wedged.set()
            self.stopped.wait()
        elif self.mode == "hang":
            self.stopped.wait()
        elif self.mode == "slow_headers":
            head = f"HTTP/1.1 {answer.status} {REASONS.get(answer.status, 'OK')}\r\n".encode() + b"X-Slow: "
            for byte in head + b"a" * 60_000:
                if self.stopped.wait(DRIP_S):
                    return
                sock.sendall(bytes([byte]))
        elif self.mode == "drop_mid_answer":
            sock.sendall(_head(answer, len(answer.body)) + answer.body[: len(answer.body) // 2])
            sock.close()
        elif self.mode == "trickle_body":
            declared = len(answer.body) + 10_000_000
            sock.sendall(_head(answer, declared))
            for byte in answer.body + b" " * 10_000_000:
                if self.stopped.wait(DRIP_S):
                    return
                sock.sendall(bytes([byte]))

    def stop(self) -> None:
        self.stopped.set()
        self._thread.join(2)
        self._listener.close()
        with self._lock:
            for c in self._conns:
                with contextlib.suppress(OSError):
                    c.close()

    def __enter__(self) -> HostileServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _head(answer: Answer, length: int | None) -> bytes:
    lines = [f"HTTP/1.1 {answer.status} {REASONS.get(answer.status, 'OK')}", *(f"{k}: {v}" for k, v in answer.headers)]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _wire(answer: Answer) -> bytes:
    if answer.stream:
        return _head(answer, None) + answer.body
    return _head(answer, len(answer.body)) + answer.body


# --------------------------------------------------------------------------------------------- the backends


def _capture(name: str, folder: str = "llama-server") -> Answer:
    path = FIXTURES / folder / name
    body = path.read_bytes()
    status, headers = 200, [("Content-Type", "application/json")]
    head = path.with_name(path.name + ".headers.txt")
    if head.exists():
        lines = head.read_text(encoding="utf-8").splitlines()
        status = int(lines[0].split()[1])
        headers = [(k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in lines[1:] if ":" in line)
                   if k.strip().lower() not in ("content-length", "connection", "keep-alive")]
    return Answer(status, body, tuple(headers))


def _json(obj: Any, headers: tuple[tuple[str, str], ...] = (("Content-Type", "application/json"),)) -> Answer:
    return Answer(200, json.dumps(obj).encode(), headers)


def llama_routes() -> dict[str, Answer]:
    """A llama-server generating (the main run's captures)."""
    return {"/health": _capture("health.generating.json"), "/props": _capture("props.generating.json"),
            "/slots": _capture("slots.generating.json"), "/metrics": _capture("metrics.generating.txt"),
            "/v1/models": _capture("v1-models.generating.json")}


ROUTER_MODEL = "tiny-llama-F32"
LLAMA = (("Content-Type", "application/json"), ("Server", "llama.cpp"))


def router_routes() -> dict[str, Answer]:
    """A llama-server router with one model loaded and one loading (its progress on ``/models/sse``)."""
    models = json.loads((FIXTURES / "llama-router" / "models.loaded.json").read_bytes())
    loading = json.loads(json.dumps(models["data"][0]))
    loading["id"], loading["status"] = "tiny-llama-Q8", {"value": "loading", "args": ["llama-server", "--port", "0"]}
    models["data"].append(loading)
    props = json.loads(_capture("props.idle.json").body)
    props.update({"model_alias": ROUTER_MODEL, "model_path": "/tmp/rt/models/tiny-llama-F32.gguf", "total_slots": 2,
                  "is_sleeping": False, "endpoint_metrics": True})
    props["default_generation_settings"]["n_ctx"] = 2048
    event = {"model": "tiny-llama-Q8", "event": "status_change",
             "data": {"status": "loading", "progress": {"stages": ["text_model"], "value": 0.5}}}
    return {"/props": Answer(200, (FIXTURES / "llama-router" / "props.router.json").read_bytes(), LLAMA),
            "/models": _json(models, LLAMA), "/v1/models": _json(models, LLAMA),
            "/models/sse": Answer(200, f"data: {json.dumps(event)}\n\n".encode(),
                                  (("Content-Type", "text/event-stream"),), stream=True),
            "/props?model": _json(props, LLAMA),
            "/slots?model": Answer(200, (FIXTURES / "llama-router" / "slots.model-idle.json").read_bytes(), LLAMA),
            "/metrics?model": _capture("metrics.idle.txt"), "/health": _json({"status": "ok"}, LLAMA)}


def swap_routes(upstream_url: str) -> dict[str, Answer]:
    """llama-swap (its documented shapes) with one model running at ``upstream_url``."""
    models = {"object": "list", "data": [
        {"id": "qwen3-8b", "object": "model", "owned_by": "llama-swap",
         "meta": {"llamaswap": {"type": "model"}}, "status": {"value": "loaded"}},
        {"id": "gemma-3-12b", "object": "model", "owned_by": "llama-swap", "status": {"value": "unloaded"}}]}
    port = upstream_url.rsplit(":", 1)[1]
    running = {"running": [{"model": "qwen3-8b", "state": "ready", "proxy": upstream_url, "ttl": 300,
                            "cmd": f"llama-server --port {port} --model /models/qwen3-8b.gguf -c 16384"}]}
    return {"/running": _json(running), "/v1/models": _json(models),
            "/api/version": _json({"version": "v250", "commit": "0bdb372"})}


def ollama_routes(blob: str) -> dict[str, Answer]:
    """Ollama 0.x with llama3.1:8b loaded (its model file named ``blob``, so each case's child is its own)."""
    show = json.loads((FIXTURES / "ollama" / "show.llama3.1-8b.verbose.json").read_bytes())
    show["modelfile"] = "\n".join(f"FROM /usr/share/ollama/.ollama/models/blobs/{blob}" if line.startswith("FROM /")
                                  else line for line in show["modelfile"].splitlines())
    return {"/api/version": Answer(200, (FIXTURES / "ollama" / "version.json").read_bytes()),
            "/api/ps": Answer(200, (FIXTURES / "ollama" / "ps.full-offload.json").read_bytes()),
            "/api/show": _json(show)}


def vllm_routes() -> dict[str, Answer]:
    return {"/metrics": Answer(200, (FIXTURES / "vllm" / "metrics.v1.txt").read_bytes(),
                               (("Content-Type", "text/plain; version=0.0.4"),)),
            "/v1/models": Answer(200, (FIXTURES / "vllm" / "v1-models.json").read_bytes()),
            "/version": _json({"version": "0.11.0"})}


def lmstudio_routes() -> dict[str, Answer]:
    return {"/api/v1/models": Answer(200, (FIXTURES / "lmstudio" / "v1-models.json").read_bytes()),
            "/api/v0/models": Answer(200, (FIXTURES / "lmstudio" / "v0-models.json").read_bytes())}


def stats_routes() -> dict[str, Answer]:
    """A ``kvmon proxy``'s measurements document, idle."""
    now = time.time()
    doc = {"kvmon_proxy": 1, "upstream": None, "listen": "", "started_unix": now - 60, "now_unix": now,
           "in_flight": [], "recent": [], "totals": {"requests": 0}}
    return {"/kvmon/stats": _json(doc)}


def exporter_routes() -> dict[str, Answer]:
    """A remote ``kvmon serve``'s device series (one GPU and the host)."""
    text = "\n".join([
        f"kvmon_last_poll_timestamp_seconds {time.time():.3f}",
        'kvmon_device_info{gpu="0",kind="gpu",vendor="nvidia",source="nvml",bandwidth_source="table"} 1',
        'kvmon_gpu_vram_total_bytes{gpu="0",gpu_name="NVIDIA GeForce RTX 4090"} 25757220864',
        'kvmon_gpu_vram_used_bytes{gpu="0",gpu_name="NVIDIA GeForce RTX 4090"} 9663676416',
        'kvmon_gpu_peak_bandwidth_bytes_per_second{gpu="0",gpu_name="NVIDIA GeForce RTX 4090"} 1.008e+12',
        "kvmon_host_ram_total_bytes 68719476736", "kvmon_host_ram_available_bytes 34359738368", ""])
    return {"/metrics": Answer(200, text.encode(), (("Content-Type", "text/plain; version=0.0.4"),))}


# --------------------------------------------------------------------------------------------- the rigs


@dataclass
class Rig:
    """The servers of one case: ``url`` is what ``once`` is pointed at, ``extra`` its further arguments."""

    url: str
    extra: list[str] = field(default_factory=list)
    servers: list[HostileServer] = field(default_factory=list)
    children: list[subprocess.Popen[bytes]] = field(default_factory=list)
    patches: list[tuple[Any, str, Any]] = field(default_factory=list)  # (module, name, value) while it runs
    cleanup: list[Callable[[], None]] = field(default_factory=list)

    def stop(self) -> None:
        for s in self.servers:
            s.stop()
        for p in self.children:
            p.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(3)
            if p.poll() is None:
                p.kill()
                p.wait()
        for fn in self.cleanup:
            with contextlib.suppress(Exception):
                fn()


def _split(endpoint: str) -> tuple[str, str]:
    """("upstream", "/slots") for "upstream /slots"; ("", "/props") for "/props"."""
    where, _, path = endpoint.rpartition(" ")
    return where, path


def _pick(endpoint: str, where: str, mode: str | None) -> tuple[str | None, str | None]:
    w, path = _split(endpoint)
    return (path, mode) if w == where else (None, None)


def rig_llama(endpoint: str, mode: str | None) -> Rig:
    s = HostileServer(llama_routes(), *_pick(endpoint, "", mode))
    return Rig(s.url, servers=[s])


def rig_router(endpoint: str, mode: str | None) -> Rig:
    s = HostileServer(router_routes(), *_pick(endpoint, "", mode))
    return Rig(s.url, servers=[s])


def rig_swap(endpoint: str, mode: str | None) -> Rig:
    up = HostileServer(llama_routes(), *_pick(endpoint, "upstream", mode))
    s = HostileServer(swap_routes(up.url), *_pick(endpoint, "", mode))
    return Rig(s.url, servers=[s, up])


CHILD_SCRIPT = """
import os, sys, json
sys.path.insert(0, os.environ["KVMON_MATRIX_TESTS"])
from hostile_matrix import HostileServer, llama_routes
port = int(sys.argv[sys.argv.index("--port") + 1])
mode = os.environ.get("KVMON_MATRIX_MODE") or None
server = HostileServer(llama_routes(), "/slots" if mode else None, mode, port=port)
print("ready", flush=True)
sys.stdin.read()  # until the parent closes it
server.stop()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_child(blob: str, mode: str | None, folder: str) -> subprocess.Popen[bytes]:
    """Ollama's model server as Ollama starts it (``llm/llama_server.go``): a child of the process listening on
    Ollama's port (this one), whose argv has Ollama's flags; it serves llama-server's captures."""
    script = os.path.join(folder, "llama-server")
    with open(script, "w", encoding="utf-8") as f:
        f.write(CHILD_SCRIPT)
    argv = [sys.executable, script, "--model", f"/usr/share/ollama/.ollama/models/blobs/{blob}",
            "--port", str(_free_port()), "--host", "127.0.0.1", "--no-webui", "--offline", "-c", "8192", "-np", "1",
            "--log-verbosity", "4", "--no-log-prefix", "--no-log-timestamps"]
    env = {**os.environ, "KVMON_MATRIX_TESTS": str(Path(__file__).resolve().parent), "KVMON_MATRIX_MODE": mode or ""}
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert proc.stdout is not None
    proc.stdout.readline()  # "ready"
    return proc


def _closed_port_url() -> str:
    return f"http://127.0.0.1:{_free_port()}"


def _proxy_modules() -> list[Any]:
    """The sources that read a ``kvmon proxy`` at a default address (patched: never a real one on this machine)."""
    import kvmon.sources.lmstudio.source as lmstudio
    import kvmon.sources.ollama.source as ollama

    return [ollama, lmstudio]


def _with_proxy(rig: Rig, endpoint: str, mode: str | None) -> Rig:
    """A ``kvmon proxy`` at the sources' default address for the proxy's own cases; none for the others."""
    if _split(endpoint)[0] == "proxy":
        proxy = HostileServer(stats_routes(), *_pick(endpoint, "proxy", mode))
        rig.servers.append(proxy)
        rig.patches += [(m, "DEFAULT_PROXY_URL", proxy.url) for m in _proxy_modules()]
    return rig


def rig_ollama(endpoint: str, mode: str | None) -> Rig:
    """Ollama; with its llama-server child for the child's cases, with ``kvmon proxy`` for the proxy's (each is
    the live rate's source when there: the other would stand in for it)."""
    blob = f"sha256-{os.urandom(32).hex()}"
    s = HostileServer(ollama_routes(blob), *_pick(endpoint, "", mode))
    where = _split(endpoint)[0]
    rig = _with_proxy(Rig(s.url, servers=[s]), endpoint, mode)
    if where == "child":
        folder = tempfile.mkdtemp(prefix="kvmon-matrix-")
        rig.children.append(_start_child(blob, mode, folder))
        rig.cleanup.append(lambda: __import__("shutil").rmtree(folder, ignore_errors=True))
    return rig


def rig_vllm(endpoint: str, mode: str | None) -> Rig:
    s = HostileServer(vllm_routes(), *_pick(endpoint, "", mode))
    return Rig(s.url, servers=[s])


def rig_lmstudio(endpoint: str, mode: str | None) -> Rig:
    routes = lmstudio_routes()
    if endpoint == "/api/v0/models":  # an LM Studio before 0.4: REST v0 only
        del routes["/api/v1/models"]
    s = HostileServer(routes, *_pick(endpoint, "", mode))
    return _with_proxy(Rig(s.url, servers=[s]), endpoint, mode)


def rig_remote_devices(endpoint: str, mode: str | None) -> Rig:
    s = HostileServer(llama_routes())
    exporter = HostileServer(exporter_routes(), *_pick(endpoint, "devices", mode))
    return Rig(s.url, extra=["--devices", exporter.url], servers=[s, exporter])


@dataclass(frozen=True)
class Backend:
    name: str
    endpoints: tuple[str, ...]  # "PATH" on the server itself, "WHERE PATH" on another one (upstream, proxy, child)
    rig: Callable[[str, str | None], Rig]


BACKENDS: dict[str, Backend] = {b.name: b for b in (
    Backend("llama-server", ("/health", "/props", "/slots", "/metrics", "/v1/models"), rig_llama),
    Backend("router", ("/props", "/models", "/models/sse", "/props?model", "/slots?model", "/metrics?model",
                       "/v1/models"), rig_router),
    Backend("llama-swap", ("/running", "/v1/models", "/api/version", "upstream /health", "upstream /props",
                           "upstream /slots", "upstream /metrics", "upstream /v1/models"), rig_swap),
    Backend("ollama", ("/api/version", "/api/ps", "/api/show", "proxy /kvmon/stats", "child /slots"), rig_ollama),
    Backend("vllm", ("/metrics", "/v1/models", "/version"), rig_vllm),
    Backend("lmstudio", ("/api/v1/models", "/api/v0/models", "proxy /kvmon/stats"), rig_lmstudio),
    Backend("remote-devices", ("devices /metrics",), rig_remote_devices),
)}


def cases(backends: list[str] | None = None, modes: tuple[str, ...] = MODES) -> Iterator[tuple[str, str, str]]:
    """(backend, endpoint, mode) for every case of the matrix (of ``backends``, default all)."""
    for b in backends or list(BACKENDS):
        for e in BACKENDS[b].endpoints:
            for m in modes:
                yield b, e, m


# --------------------------------------------------------------------------------------------- one case


@dataclass
class CaseResult:
    backend: str
    endpoint: str
    mode: str | None
    elapsed_s: float
    rc: int | None
    stderr: str
    doc: dict[str, Any] | None
    error: str | None = None  # a traceback: kvmon itself failed

    @property
    def first_line(self) -> str:
        return (self.stderr.strip().splitlines() or [""])[0][:160]


@contextlib.contextmanager
def _patched(patches: list[tuple[Any, str, Any]]) -> Iterator[None]:
    saved = [(mod, name, getattr(mod, name)) for mod, name, _ in patches]
    for mod, name, value in patches:
        setattr(mod, name, value)
    try:
        yield
    finally:
        for mod, name, value in saved:
            setattr(mod, name, value)


@contextlib.contextmanager
def no_proxy() -> Iterator[None]:
    """The sources' default ``kvmon proxy`` address on a closed port while cases run (none of this machine's)."""
    url = _closed_port_url()
    with _patched([(m, "DEFAULT_PROXY_URL", url) for m in _proxy_modules()]):
        yield


def run_case(backend: str, endpoint: str, mode: str | None, *, timeout_s: float, interval_s: float) -> CaseResult:
    """``kvmon once URL --timeout T --interval I --json`` against one case; how long it took and what it said.
    A case with a proxy patches module constants: run it alone (``run_cases`` does)."""
    from kvmon.cli import build_parser
    from kvmon.cli.once import run

    rig = BACKENDS[backend].rig(endpoint, mode)
    out, err = io.StringIO(), io.StringIO()
    error = None
    rc: int | None = None
    args = build_parser().parse_args(["once", rig.url, "--timeout", f"{timeout_s:g}", "--interval",
                                      f"{interval_s:g}", "--json", *rig.extra])
    try:
        with _patched(rig.patches):
            t0 = time.monotonic()
            try:
                rc = run(args, out, err)
            except BaseException:  # kvmon failing is what the matrix looks for
                import traceback

                error = traceback.format_exc()
            elapsed = time.monotonic() - t0
    finally:
        rig.stop()
    doc = None
    if rc == 0:
        with contextlib.suppress(ValueError):
            doc = json.loads(out.getvalue())
    return CaseResult(backend, endpoint, mode, elapsed, rc, err.getvalue(), doc, error)


def run_cases(todo: list[tuple[str, str, str]], *, timeout_s: float, interval_s: float, workers: int = 12,
              on_result: Callable[[CaseResult], None] | None = None) -> list[CaseResult]:
    """Every case in ``todo``, ``workers`` at a time (each mostly waits on sockets); those with a proxy of their
    own (it sits at a module's default address) one at a time afterwards. Results in ``todo``'s order."""
    from concurrent.futures import ThreadPoolExecutor

    def one(case: tuple[str, str, str]) -> CaseResult:
        r = run_case(*case, timeout_s=timeout_s, interval_s=interval_s)
        if on_result is not None:
            on_result(r)
        return r

    alone = [c for c in todo if _split(c[1])[0] == "proxy"]
    together = [c for c in todo if c not in alone]
    with no_proxy(), ThreadPoolExecutor(max_workers=workers) as pool:
        done = dict(zip(together, pool.map(one, together), strict=True))
    done.update({c: one(c) for c in alone})
    return [done[c] for c in todo]


def bound_s(timeout_s: float, interval_s: float) -> float:
    """The longest ``once`` may take whatever hangs: two polls of one deadline each, the interval, a second."""
    return 2 * timeout_s + interval_s + 1.0


# --------------------------------------------------------------------------------------------- every path fails

_HTML = (("Content-Type", "text/html"),)
_NGINX_502 = (b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1>"
              b"</center>\r\n<hr><center>nginx/1.24.0</center>\r\n</body>\r\n</html>\r\n")
# What a gateway (nginx in front of a model server that died) or a wrong server answers on every path.
FAILURES: dict[str, Answer] = {
    "502": Answer(502, _NGINX_502, _HTML),
    "500": Answer(500, b'{"error":{"code":500,"message":"internal error","type":"server_error"}}'),
    "404": Answer(404, b"<html><body><h1>404 Not Found</h1></body></html>", _HTML),
    "html-200": Answer(200, b"<!DOCTYPE html><html><head><title>Sign in</title></head><body>Sign in</body></html>",
                       _HTML),
    "invalid-json": Answer(200, b'{"status": "ok", "slots": [{"id": 0, '),
    "empty-body": Answer(200, b""),
    "redirect": Answer(302, b"", (("Location", "/login"), ("Content-Type", "text/html"))),
}
FAIL_BACKENDS = ("llama-server", "router", "llama-swap", "ollama", "vllm", "lmstudio")


@dataclass
class FailResult:
    """One backend, read healthy once, then every path of it failing one way: what the next polls made of it."""

    backend: str
    failure: str
    elapsed_s: float  # the failing polls, both
    status: str | None  # the connection status of the last failing poll
    reason: str
    read: bool  # whether the last failing poll counted the server as read (it must not)
    healthy_read: bool  # whether the healthy poll before read it (it must)
    error: str | None = None


def _healthy_rig(backend: str) -> Rig:
    return BACKENDS[backend].rig("", None)


def run_fail_case(backend: str, failure: str, *, timeout_s: float) -> FailResult:
    """Open a monitor on the backend while it answers, poll, then make every path of its server answer ``failure``
    (``FAILURES``) and poll twice more (the second poll: what memos or kept answers would hide)."""
    from kvmon.app.build import open_monitor

    rig = _healthy_rig(backend)
    server = rig.servers[0]
    monitor = None
    try:
        with _patched(rig.patches):
            monitor = open_monitor(rig.url, timeout_s=timeout_s, gpu=False, host=False)
            healthy = monitor.poll()
            server.every = FAILURES[failure]
            t0 = time.monotonic()
            monitor.poll()
            snap = monitor.poll()
            elapsed = time.monotonic() - t0
    except BaseException:
        import traceback

        return FailResult(backend, failure, 0.0, None, "", True, False, traceback.format_exc())
    finally:
        if monitor is not None:
            monitor.close()
        rig.stop()
    return FailResult(backend, failure, elapsed, snap.connection.status.value, snap.connection.reason or "",
                      snap.server_read, healthy.server_read)


def run_fail_once(failure: str, *, timeout_s: float, interval_s: float) -> CaseResult:
    """``kvmon once URL`` against a server whose every path answers ``failure`` from the start."""
    from kvmon.cli import build_parser
    from kvmon.cli.once import run

    server = HostileServer({})
    server.every = FAILURES[failure]
    out, err = io.StringIO(), io.StringIO()
    args = build_parser().parse_args(["once", server.url, "--timeout", f"{timeout_s:g}", "--interval",
                                      f"{interval_s:g}", "--json"])
    error = None
    rc: int | None = None
    t0 = time.monotonic()
    try:
        with no_proxy():
            rc = run(args, out, err)
    except BaseException:
        import traceback

        error = traceback.format_exc()
    finally:
        elapsed = time.monotonic() - t0
        server.stop()
    return CaseResult("any", "every path", failure, elapsed, rc, err.getvalue(), None, error)
