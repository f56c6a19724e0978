"""SimServer: the simulated llama-server or Ollama on a real HTTP port, with its simulated GPUs.

    sim = SimServer("seed-3090x2", speed=50, faults=["restart@120"])
    url = sim.start()          # http://127.0.0.1:<random free port>
    ... point any client, or kvmon's own sources, at url; kvmon's NVML source at sim.nvml ...
    sim.stop()

The server runs in-process on daemon threads (stdlib ThreadingHTTPServer); ``sim.server_pids`` is this
process, so GPU memory attribution works as it would for a real server. Faults: ``kvmon.sim.faults``.

What a monitor needs to read it like a real server, with no special case: ``sim.url``; ``sim.log_path``
(the llama-server ``-lv 4`` log: KV types and sizes, layers offloaded); ``/props`` ``model_path`` names a
real GGUF file holding the model's metadata; ``sim.nvml`` for ``NvmlSource(nvml=...)``. Simulated time
starts when serving starts (``start_at_s`` joins the story later). At ``speed`` X the server's own
timings are simulated seconds, while rates a client measures against its real clock come out X times
higher.
"""

from __future__ import annotations

import hashlib
import os
import select
import socket
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl

from kvmon.sim import permit
from kvmon.sim.clock import SimClock
from kvmon.sim.engine import Epoch, SimEngine
from kvmon.sim.faults import Fault, FaultPlan, parse_faults
from kvmon.sim.files import (
    ServerLog,
    gguf_metadata,
    remove_sim_dir,
    request_end_lines,
    write_gguf_header,
)
from kvmon.sim.gpu import SimGpus
from kvmon.sim.llama_api import BAD_KEY, LOADING, LlamaApi
from kvmon.sim.lmstudio_api import LmStudioApi
from kvmon.sim.ollama_api import OllamaApi
from kvmon.sim.reply import Reply, StreamAborted, json_reply, parse_body
from kvmon.sim.requests import SimRequest
from kvmon.sim.scenarios import Scenario, get_scenario
from kvmon.sim.vllm_api import VllmApi

MAX_REQUEST_BYTES = 16 * 1024 * 1024
GARBAGE = b"\x00\xff<!-- simulated garbage --> {\"status\": tru\xfe\xfd\x8b not json nor metrics ]]\n"


@dataclass(frozen=True)
class SimBackend:
    """How the simulator plays one kind of server: the API that answers, what its HTTP looks like, its refusals and
    the files it leaves. The defaults are those most servers share."""

    api: Callable[[Any], Any]  # (the SimServer) -> the object whose ``handle`` answers each request
    # headers on every answer in place of a Date (llama-server's cpp-httplib sends no Date)
    server_headers: tuple[tuple[str, str], ...] = ()
    keep_alive: str | None = None  # the Keep-Alive header on a connection kept open
    loading_refusal: dict[str, Any] | None = None  # the 503 body while the model loads (None: it answers anyway)
    bad_key_refusal: dict[str, Any] | None = None  # the 401 body for a missing or wrong key
    public_paths: tuple[str, ...] = ()  # paths answered without the key
    # Ollama's layout: its server.log holds its own lines and its model server's, the model file is a
    # content-addressed blob, and its model server can run as a real child process (``kvmon.sim.ollama_child``)
    ollama_layout: bool = False


LLAMA_SERVER = SimBackend(LlamaApi, server_headers=(("Server", "llama.cpp"), ("Access-Control-Allow-Origin", "")),
                          keep_alive="timeout=5, max=100", loading_refusal=LOADING, bad_key_refusal=BAD_KEY,
                          public_paths=("/health", "/v1/health"))
SIM_BACKENDS: dict[str, SimBackend] = {
    "llama-server": LLAMA_SERVER,
    "ollama": SimBackend(OllamaApi, ollama_layout=True),
    "vllm": SimBackend(VllmApi),
    "lmstudio": SimBackend(LmStudioApi),
}
UNAUTHORIZED = {"error": "unauthorized"}


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = socket.SOMAXCONN  # as llama-server's: the standard library's 5 drops a burst of clients
    sim: Any  # the SimServer, or the MultiSim of a router or llama-swap


class _HttpServer6(_HttpServer):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HttpServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet, like a server without -v
        pass

    def setup(self) -> None:
        super().setup()
        # headers and body go out in separate writes: without this, Nagle + delayed ACK add ~40 ms each
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _serve(self) -> None:
        """Answer one request, whatever its method: the simulated server's routes decide."""
        sim = self.server.sim
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_REQUEST_BYTES:
            self._write(json_reply({"error": {"code": 413, "message": "request body too large or malformed length",
                                              "type": "invalid_request_error"}}, 413, close=True))
            return
        raw = self.rfile.read(length) if length > 0 else b""
        path, _, qs = self.path.partition("?")
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            reply = sim.answer(self.command, path, dict(parse_qsl(qs)), headers, raw)
        except StreamAborted:
            self.close_connection = True
            return
        except Exception as e:  # a simulator bug answers 500 like the real server, and the server keeps going
            reply = json_reply({"error": {"code": 500, "message": f"simulator error: {type(e).__name__}: {e}",
                                          "type": "server_error"}}, 500)
        if reply is None:  # stopping while hung
            self.close_connection = True
            return
        self._write(reply)

    do_GET = do_POST = do_DELETE = _serve

    def _write(self, reply: Reply) -> None:
        sim = self.server.sim
        now = sim.clock.now()
        drip = sim.faults.drip_bytes_per_s(now)
        body = GARBAGE if reply.stream is None and sim.faults.garbage(now) else reply.body
        self.send_response_only(reply.status)
        if not sim.served_as.server_headers:
            self.send_header("Date", self.date_time_string())
        for k, v in (*sim.served_as.server_headers, *reply.headers.items()):
            self.send_header(k, v)
        self.send_header("Content-Type", reply.content_type)
        try:
            if reply.stream is not None:
                self.send_header("Transfer-Encoding", "chunked")
                self._end_headers(reply.close)
                try:
                    for chunk in reply.stream:
                        if chunk:
                            self._send(b"%x\r\n%s\r\n" % (len(chunk), chunk), drip)
                        elif reply.on_abort is not None and self._client_gone():
                            raise BrokenPipeError("the client closed the connection")
                except StreamAborted:
                    self.close_connection = True
                    return
                self._send(b"0\r\n\r\n", drip)
            else:
                self.send_header("Content-Length", str(len(body)))
                self._end_headers(reply.close)
                self._send(body, drip)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.close_connection = True
            if reply.on_abort is not None:
                reply.on_abort()

    def _client_gone(self) -> bool:
        """Whether the client has closed its end (a readable socket with nothing to read)."""
        try:
            readable, _w, _x = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _end_headers(self, close: bool) -> None:
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        elif self.server.sim.served_as.keep_alive:
            self.send_header("Keep-Alive", self.server.sim.served_as.keep_alive)
        self.end_headers()

    def _send(self, data: bytes, drip: float | None) -> None:
        if not drip:
            self.wfile.write(data)
            self.wfile.flush()
            return
        step = max(1, int(drip / 10))
        for i in range(0, len(data), step):
            if self.server.sim.stopping.wait(step / drip):
                raise BrokenPipeError("simulator stopping")
            self.wfile.write(data[i:i + step])
            self.wfile.flush()


class SimServer:
    """A simulated model server for a named scenario on 127.0.0.1 (random free port by default)."""

    def __init__(self, scenario: str | Scenario = "seed-3090x2", *, speed: float = 1.0, host: str = "127.0.0.1",
                 port: int = 0, faults: Iterable[str | Fault] = (), autoplay: bool = True,
                 gpu_refresh_s: float = 0.1, files_dir: str | None = None, start_at_s: float = 0.0,
                 clock: Any = None, server_pid: int | None = None, ollama_child: bool = False,
                 stepped: bool = False) -> None:
        """``clock``: another clock's time to live in (a router's or llama-swap's model servers); ``server_pid``:
        the process id its simulated GPUs show for it (several model servers in one process); ``ollama_child``: a
        simulated Ollama runs its model server as a real child process, as Ollama >= 0.30 does
        (``kvmon.sim.ollama_child``); ``stepped``: simulated time never runs by itself, only ``step`` moves it (it
        stands at ``start_at_s`` when serving starts)."""
        permit.allow("the simulator")  # its simulated GPUs and host are what the demo shows
        self.stepped = stepped
        self._want_child = ollama_child
        self.child: Any = None  # that process, once started
        self.child_port: int | None = None
        self.scenario = get_scenario(scenario) if isinstance(scenario, str) else scenario
        self.served_as = SIM_BACKENDS.get(self.scenario.backend, LLAMA_SERVER)
        # simulated time starts when serving starts
        self.clock: Any = clock if clock is not None else SimClock(speed, running=False)
        self.sleeping = False  # idle sleep (a router's model): /props says is_sleeping, the model is unloaded
        self._server_pid = server_pid
        self.faults = FaultPlan(parse_faults(list(faults)))
        self.gpus = SimGpus(self.scenario)
        # the files a real server leaves: the GGUF /props points at (its tensor directory real, its data a hole),
        # and the -lv 4 log
        self._own_dir = files_dir is None
        self.files_dir = files_dir or tempfile.mkdtemp(prefix="kvmon-sim-")
        if self._own_dir:  # removed on stop(), or when the object goes away / at exit if never stopped
            weakref.finalize(self, remove_sim_dir, self.files_dir)
        self.model_path = _model_file(self.files_dir, self.scenario, blob=self.served_as.ollama_layout)
        ollama = self.served_as.ollama_layout  # Ollama's server.log holds its model server's lines too
        self.log_path = os.path.join(self.files_dir, "server.log" if ollama else "llama-server.log")
        self.log = ServerLog(self.log_path, ollama=ollama)
        if ollama:
            self._ollama_start_lines()
        self.engine = SimEngine(self.scenario, self.clock, self.faults, autoplay=autoplay, on_load=self._loaded,
                                on_request_end=self._request_ended)
        first = self.engine.model_at(0.0)  # load the first model now: a bad scenario fails here, not in a thread
        # general.name as real GGUFs have it: the model's name without the preset's note on its shape
        write_gguf_header(self.model_path, gguf_metadata(first), first.tensors)
        if start_at_s > 0:  # join the story later (a demo or screenshot that starts deep in the conversation)
            self.clock.advance(start_at_s)
        self.host, self.port = host, port
        self.gpu_refresh_s = gpu_refresh_s
        self.stopping = threading.Event()
        self._httpd: _HttpServer | None = None
        self._threads: list[threading.Thread] = []
        self.api: Any = self.served_as.api(self)
        self.refresh_gpus()

    # -- lifecycle ------------------------------------------------------------------------------------
    def start(self) -> str:
        """Bind and serve on daemon threads; returns the base URL."""
        if self._httpd is not None:
            return self.url
        server_class = _HttpServer6 if ":" in self.host else _HttpServer
        httpd = server_class((self.host, self.port), _Handler)
        httpd.sim = self
        self._httpd = httpd
        self.port = int(httpd.server_address[1])
        serve = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                 name="kvmon-sim-http", daemon=True)
        self._threads = [serve]
        if self.gpu_refresh_s > 0:  # a router's model server shares the router's GPUs: no thread of its own
            self._threads.append(threading.Thread(target=self._gpu_loop, name="kvmon-sim-gpu", daemon=True))
        for t in self._threads:
            t.start()
        if not self.stepped:
            self.clock.start()
        if self._want_child and self.served_as.ollama_layout:
            from kvmon.sim.ollama_child import start_child

            self.child, self.child_port = start_child(self)
        return self.url

    def stop(self) -> None:
        """Stop serving; hung and streaming answers end at once; the simulator's own files are removed."""
        self.stopping.set()
        if self.child is not None:
            from kvmon.sim.ollama_child import stop_child

            stop_child(self.child)
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        for t in self._threads:
            t.join(timeout=2)
        self._httpd = None
        if self._own_dir and os.path.isdir(self.files_dir):
            remove_sim_dir(self.files_dir)

    def _request_ended(self, r: SimRequest) -> None:
        ended = getattr(getattr(self, "api", None), "request_ended", None)
        if ended is not None:  # a backend that keeps per-request figures (vLLM's latency histograms)
            ended(r)
        self.log.write(r.t_end, request_end_lines(r.id_task, r.slot, r.prompt_n, r.prefill_s, r.predicted_n,
                                                  r.predicted_s, r.context_tokens(r.t_end)))

    def _loaded(self, epoch: Epoch) -> None:
        """A (re)load: write the load-time log lines with what was free on each GPU then."""
        model = epoch.model
        assert model is not None
        s = self.scenario
        free = [model.device_memory_bytes() - (self.scenario.other_vram_bytes(epoch.t_begin) if i == 0 else 0)
                for i in range(s.n_gpus)]
        if self.log.ollama:
            from kvmon.sim.ollama_child import ollama_flags

            port = self.child_port or 0
            self.log.ollama_line("server.go:212", "starting llama server",
                                 cmd=" ".join(["/usr/lib/ollama/llama-server", *ollama_flags(self, port)]))
        self.log.load_block(model, epoch.t_begin, model.gpu.name, free, self.model_path)

    def _ollama_start_lines(self) -> None:
        """What Ollama logs when it starts: its settings (``envconfig.Values()``) and where it listens."""
        s = self.scenario
        env = {"OLLAMA_CONTEXT_LENGTH": str(s.n_ctx // s.n_parallel), "OLLAMA_NUM_PARALLEL": str(s.n_parallel),
               "OLLAMA_FLASH_ATTENTION": "true" if s.flash_attn == "on" else "false",
               "OLLAMA_KV_CACHE_TYPE": "" if s.type_k == "f16" else s.type_k, "OLLAMA_KEEP_ALIVE": "5m0s"}
        self.log.ollama_line("routes.go:1580", "server config",
                             env="map[" + " ".join(f"{k}:{v}" for k, v in sorted(env.items())) + "]")

    def __enter__(self) -> SimServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def nvml(self) -> Any:
        """The FakeNvml whose GPUs follow the simulation (pass it to kvmon's NVML source)."""
        return self.gpus.nvml

    def unified_memory_source(self) -> Any:
        """On a simulated Mac, the device source of its unified memory (``kvmon.sim.devices``); else None (its NVIDIA
        GPUs are read through ``sim.nvml``, none on a CPU-only machine)."""
        if self.scenario.device != "metal":
            return None
        from kvmon.sim.devices import SimUnifiedMemory

        return SimUnifiedMemory(self)

    def host_source(self) -> Any:
        """The simulated machine's host RAM and its bandwidth (``kvmon.sim.devices``)."""
        from kvmon.sim.devices import SimHost

        return SimHost(self)

    @property
    def server_pids(self) -> tuple[int, ...]:
        return (self._server_pid or os.getpid(),)

    def step(self, seconds: float) -> None:
        """Stop simulated time running by itself and move it on ``seconds`` (a document or a test that steps through
        a story poll by poll, with no real waiting and nothing left to chance); the GPUs follow at once."""
        self.clock.pause()
        self.clock.advance(seconds)
        self.refresh_gpus()

    def refresh_gpus(self) -> None:
        """Bring the simulated GPUs up to the current simulated time (the GPU thread does this too)."""
        now = self.clock.now()
        self.gpus.refresh([(self.gpus.server_pid, self.engine.activity(now))], self.scenario.other_vram_bytes(now), now)

    def _gpu_loop(self) -> None:
        while not self.stopping.wait(self.gpu_refresh_s):
            try:
                self.refresh_gpus()
            except Exception:  # a refresh bug must not kill the GPU thread; the next tick retries
                time.sleep(self.gpu_refresh_s)

    # -- requests -------------------------------------------------------------------------------------
    def answer(self, method: str, path: str, query: dict[str, str], headers: dict[str, str],
               raw: bytes) -> Reply | None:
        """Apply the faults (hang, loading, auth), then route to the backend's API."""
        now = self.clock.now()
        hang_end = self.faults.hang_until(now)
        if hang_end is not None and not self.clock.sleep_until(hang_end, self.stopping):
            return None
        now = self.clock.now()
        key = self.faults.api_key(now)
        served_as = self.served_as
        if served_as.loading_refusal is not None and self.engine.loading(now):
            return json_reply(served_as.loading_refusal, 503, close=True)
        if key is not None and path not in served_as.public_paths and not has_key(headers, key):
            if served_as.bad_key_refusal is not None:
                return json_reply(served_as.bad_key_refusal, 401, close=True)
            return json_reply(UNAUTHORIZED, 401)
        return self.api.handle(method, path, query, parse_body(raw))


def has_key(headers: dict[str, str], key: str) -> bool:
    auth = headers.get("authorization", "")
    return auth == f"Bearer {key}" or headers.get("x-api-key") == key


def _model_file(files_dir: str, scenario: Scenario, *, blob: bool) -> str:
    """Where the model file lies: as a content-addressed ``blob`` as Ollama keeps it (``models/blobs/sha256-<hex>``,
    what its modelfile's ``FROM`` and its model server's ``--model`` name); else as a ``.gguf`` named for it."""
    if blob:
        digest = hashlib.sha256(scenario.model_alias.encode()).hexdigest()
        os.makedirs(os.path.join(files_dir, "blobs"), exist_ok=True)
        return os.path.join(files_dir, "blobs", f"sha256-{digest}")
    path = os.path.join(files_dir, os.path.basename(scenario.model_alias.replace(":", "-")))
    return path if path.endswith(".gguf") else path + ".gguf"
