"""Find the llama-server that Ollama (>= 0.30) runs as a child process, and read it.

Ollama builds its model server's command line in ``llm/llama_server.go`` (``startLlamaServer``, v0.33):
``llama-server --model <blob> --port <random> --host 127.0.0.1 --no-webui --offline -c <num_ctx × parallel>
-np <parallel> --log-verbosity 4 --no-log-prefix --no-log-timestamps [--cache-type-k/-v T] --flash-attn
on|off|auto [-b N -ub N] [-ngl N] ...``, for every loaded model. Its argv carries what Ollama's API hides (the GGUF
file, total context, slots, KV cache type, flash attention), and its ``/slots`` gives the live decode counters
Ollama itself never publishes. Found with psutil: the process listening on Ollama's port, then its descendants
whose argv is exactly that shape; every other child is named in the reason when none is (a GPU-discovery
``llama-server --verbose`` without a model, an MLX model's ``ollama runner --mlx-engine``, an Ollama before 0.30
running ``ollama runner``).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import psutil

from kvmon.core.jsonvals import text_int
from kvmon.core.readings import Provenance, ServerConfig, ServerReading, SourceError
from kvmon.sources.config import merge_configs
from kvmon.sources.http import HttpClient
from kvmon.sources.llamacpp import LLAMA_SERVER
from kvmon.sources.llamacpp.args import parse_llama_server_args
from kvmon.sources.llamacpp.log import parse_llama_log
from kvmon.sources.llamacpp.parse import parse_slot
from kvmon.sources.localfile import read_tail
from kvmon.sources.procs import flag_value, lookup_listening_process, process_cmdline, program


@dataclass(frozen=True)
class OllamaChild:
    """One llama-server child: where it listens and what its command line says."""

    pid: int
    create_time: float
    host: str
    port: int
    config: ServerConfig

    @property
    def url(self) -> str:
        host = self.host if self.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"


# the flags Ollama always gives its model server (startLlamaServer), each with a value where it takes one
_OLLAMA_VALUE_FLAGS = ("--model", "--port", "--host", "-c", "-np")
_OLLAMA_SWITCHES = ("--no-webui", "--offline")


def classify_child(argv: Sequence[str]) -> tuple[str, str | None]:
    """("model", None) for Ollama's model server; else (kind, why it is not one) for the reason when none is found.

    kinds: "probe" (a GPU-discovery llama-server, no model), "mlx" (``ollama runner --mlx-engine``), "runner"
    (``ollama runner`` of an Ollama before 0.30), "llama-server" (other flags), "other".
    """
    prog, args = program(argv)
    stem = prog.removesuffix(".py")
    if stem == "ollama" and args[:1] == ["runner"]:
        if "--mlx-engine" in args:
            return "mlx", "an MLX model runs in `ollama runner --mlx-engine` (no llama-server, no /slots)"
        return "runner", "this Ollama runs models as `ollama runner` (before 0.30: no llama-server child)"
    if not (stem.startswith("llama-server") or stem.startswith("llama_server")):
        return "other", None
    port = flag_value(args, ("--port",))
    if flag_value(args, ("--model",)) is None and "--verbose" in args:
        return "probe", "a llama-server Ollama started to discover the GPUs (no model; it exits at once)"
    missing = [f for f in _OLLAMA_VALUE_FLAGS if flag_value(args, (f,)) is None]
    missing += [f for f in _OLLAMA_SWITCHES if f not in args]
    if not missing and port is not None and port.isdigit() and flag_value(args, ("--host",)) == "127.0.0.1":
        return "model", None
    return "llama-server", ("a llama-server child without the flags Ollama gives its model servers"
                            + (f" (no {', '.join(missing)})" if missing else " (--host is not 127.0.0.1)"))


def looks_like_llama_server(argv: Sequence[str]) -> bool:
    """Whether an argv is a llama-server command line exactly as Ollama builds it."""
    return classify_child(argv)[0] == "model"


def child_from_argv(pid: int, create_time: float, argv: Sequence[str]) -> OllamaChild | None:
    """An ``OllamaChild`` from a process's argv, or None when it is not a llama-server command line."""
    if not looks_like_llama_server(argv):
        return None
    parsed = parse_llama_server_args(list(argv))
    return OllamaChild(
        pid=pid,
        create_time=create_time,
        host=parsed.host,
        port=parsed.port,
        config=parsed.config,
    )


def find_children(ollama_port: int) -> tuple[int | None, list[OllamaChild], str | None]:
    """(Ollama's pid, its llama-server children, why none) for the Ollama listening on ``ollama_port``."""
    proc, reason = lookup_listening_process(ollama_port)
    if proc is None:
        return None, [], reason or f"no process found listening on port {ollama_port}"
    try:
        descendants = proc.children(recursive=True)
    except psutil.Error as e:
        return proc.pid, [], f"children of Ollama (pid {proc.pid}) not readable ({type(e).__name__})"
    children: list[OllamaChild] = []
    unreadable = 0
    others: list[str] = []
    for d in descendants:
        argv, _why = process_cmdline(d)
        if argv is None:
            unreadable += 1
            continue
        try:
            created = d.create_time()
        except psutil.Error:
            continue
        kind, why = classify_child(argv)
        child = child_from_argv(d.pid, created, argv) if kind == "model" else None
        if child is not None:
            children.append(child)
        elif why and why not in others:
            others.append(why)
    if children:
        return proc.pid, children, None
    if others:
        return proc.pid, [], f"no model server among Ollama's children (pid {proc.pid}): " + "; ".join(others)
    if unreadable:
        return proc.pid, [], f"{unreadable} child process(es) of Ollama (pid {proc.pid}) are not readable"
    return proc.pid, [], (
        f"Ollama (pid {proc.pid}) runs no llama-server child (no model loaded, or Ollama before 0.30)"
    )


def choose_child(children: Sequence[OllamaChild], blob_path: str | None) -> tuple[OllamaChild | None, str | None]:
    """The child serving the model whose blob is ``blob_path`` (from /api/show); the only child if unknown."""
    if blob_path:
        base = os.path.basename(blob_path)
        for c in children:
            path = c.config.model_path
            if path and (path == blob_path or os.path.basename(path) == base):
                return c, None
        if len(children) == 1 and not children[0].config.model_path:
            return children[0], None
        return None, f"no llama-server child of Ollama serves {base}"
    if len(children) == 1:
        return children[0], None
    return None, f"{len(children)} llama-server children and no model file to tell them apart"


def ollama_environment_config(environ: Mapping[str, str], source: Provenance = Provenance.USER) -> ServerConfig:
    """What Ollama's own environment says about the cache, flash attention and parallel slots."""
    prov: dict[str, Provenance] = {}
    fields: dict[str, Any] = {}
    kv = environ.get("OLLAMA_KV_CACHE_TYPE", "").strip().lower()
    if kv:
        fields["type_k"] = fields["type_v"] = kv
        prov["type_k"] = prov["type_v"] = source
    fa = environ.get("OLLAMA_FLASH_ATTENTION", "").strip().lower()
    if fa:
        fields["flash_attn"] = "on" if fa in ("1", "true", "on", "yes") else "off"
        prov["flash_attn"] = source
    par = text_int(environ.get("OLLAMA_NUM_PARALLEL", ""))
    if par:
        fields["n_parallel"] = par
        prov["n_parallel"] = source
    return ServerConfig(provenance=prov, **fields)


_SERVER_CONFIG_RE = re.compile(r'msg="server config".*?env="?map\[(.*)\]')
_ENV_PAIR_RE = re.compile(r"(?:^|\s)(OLLAMA_[A-Z0-9_]+):(\S*)")
LOG_TAIL_BYTES = 8 * 1024 * 1024


def parse_server_config_line(line: str) -> dict[str, str] | None:
    """The ``OLLAMA_*`` settings in Ollama's startup line ``msg="server config" env="map[K:V ...]"``."""
    m = _SERVER_CONFIG_RE.search(line)
    if not m:
        return None
    return {k: v for k, v in _ENV_PAIR_RE.findall(m.group(1))}


def ollama_log_config(path: str) -> tuple[ServerConfig | None, str | None]:
    """Settings from the last "server config" line in Ollama's log (the tail is read), or (None, why)."""
    try:
        tail = read_tail(path, LOG_TAIL_BYTES).decode("utf-8", errors="replace")  # regular files only, no waiting
    except OSError as e:
        return None, f"Ollama log {path} not readable ({e.strerror or type(e).__name__})"
    # at "\n" alone: str.splitlines() would also cut a line at a U+2028 or U+0085 inside a value
    lines = [line.removesuffix("\r") for line in tail.split("\n")]
    placement = _child_placement(lines)
    for line in reversed(lines):
        env = parse_server_config_line(line)
        if env is not None:
            return merge_configs(ollama_environment_config(env, Provenance.LOG), placement), None
    if placement is not None:
        return placement, None
    return None, f"no \"server config\" line in the Ollama log {path}"


# where the model a child loaded lives, by its log lines (besides its devices), and the file that load read
PLACEMENT_FIELDS = ("model_buffer_bytes_by_device", "kv_buffer_bytes_by_device", "compute_buffer_bytes_by_device",
                    "offloaded_layers", "total_layers", "model_path")


def _child_placement(lines: list[str]) -> ServerConfig | None:
    """Where the last model Ollama loaded lives, from its llama-server child's lines in Ollama's log (Ollama starts
    the child with -lv 4, so its device list, buffers and KV lines are there): only the placement fields, and
    ``model_path`` so that the caller can tell whether that load is the active model's."""
    cfg = parse_llama_log(lines)
    keep = ("devices", *PLACEMENT_FIELDS)
    values = {k: getattr(cfg, k) for k in keep}
    if not (values["model_buffer_bytes_by_device"] or values["devices"]):
        return None
    prov = {k: v for k, v in cfg.provenance.items() if k in keep}
    return ServerConfig(**values, provenance=prov)


SEARCH_AGAIN_S = 10.0  # after a search that found no child, search again no sooner than this


class ChildTracker:
    """Remembers the child between polls; searches again when it exits, the model changes, or after a delay."""

    def __init__(self, ollama_port: int, *, timeout_s: float = 2.0) -> None:
        self.ollama_port = ollama_port
        self._timeout_s = timeout_s
        self._child: OllamaChild | None = None
        self._children: list[OllamaChild] = []
        self._ollama_pid: int | None = None
        self._env_config: ServerConfig | None = None
        self._last_search = -1e9
        self._reason: str | None = None
        self._client: HttpClient | None = None
        self._client_url: str | None = None

    def close(self) -> None:
        """Close the connection to the child."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def _alive(self, child: OllamaChild) -> bool:
        try:
            p = psutil.Process(child.pid)
            return p.is_running() and abs(p.create_time() - child.create_time) < 0.01
        except psutil.Error:
            return False

    def _search(self) -> None:
        self._last_search = time.monotonic()
        pid, children, reason = find_children(self.ollama_port)
        if pid != self._ollama_pid:
            self._env_config = None
        self._ollama_pid, self._children, self._reason = pid, children, reason
        if pid is not None and self._env_config is None:
            try:
                env = psutil.Process(pid).environ()
            except (psutil.Error, OSError):
                env = {}
            self._env_config = ollama_environment_config(env)

    def poll(
        self, blob_path: str | None
    ) -> tuple[ServerReading | None, str | None, tuple[int, ...], ServerConfig | None]:
        """(child reading, why none, server pids, config learnt from argv or environment)."""
        now = time.monotonic()
        child = self._child
        path = child.config.model_path if child is not None else None
        other_model = blob_path and path and os.path.basename(path) != os.path.basename(blob_path)
        if child is not None and (not self._alive(child) or other_model):
            child = self._child = None
            self._last_search = -1e9
        if child is None:
            if now - self._last_search >= SEARCH_AGAIN_S:
                self._search()
            child, why = choose_child(self._children, blob_path)
            if child is None:
                pids: tuple[int, ...] = (self._ollama_pid,) if self._ollama_pid else ()
                return None, self._reason or why, pids, self._env_config
            self._child = child
        pids = tuple(p for p in (self._ollama_pid, child.pid) if p)
        config = child.config
        env = self._env_config
        if env is not None and config.n_parallel is None and env.n_parallel is not None:  # argv wins over environment
            config = replace(config, n_parallel=env.n_parallel)
        try:
            reading = self._read(child, config)
        except SourceError as e:
            self._child = None
            return None, f"llama-server child on port {child.port}: {e.failure.reason}", pids, config
        return reading, None, pids, config

    def _read(self, child: OllamaChild, config: ServerConfig) -> ServerReading:
        if self._client_url != child.url:
            self.close()
            self._client = HttpClient(child.url, timeout_s=self._timeout_s)
            self._client_url = child.url
        assert self._client is not None
        body = self._client.get_json("/slots")  # read as the llama-server source reads it
        reasons: dict[str, str] = {}
        slots = tuple(s for s in (parse_slot(raw, reasons) for raw in body) if s is not None) if isinstance(
            body, list) else ()
        return ServerReading(
            t_monotonic=time.monotonic(),
            t_wall=time.time(),
            backend=LLAMA_SERVER,
            url=self._client.display_url,
            slots=slots,
            total_slots=len(slots) or None,
            kv_unified=config.kv_unified,
            config=config,
            live_rate_source="slots",
            server_pids=(child.pid,),
        )
