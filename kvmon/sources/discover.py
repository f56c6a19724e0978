"""Find every model server on this machine: first from the process table (llama-server on any port, its router
mode, llama-swap, Ollama, ``vllm serve``, LM Studio), then on the ports they listen on by default; each candidate
is asked what it is.

A llama-server that Ollama, llama-swap or a router started is part of its parent and is not listed on its own.
Where a process's sockets or command line are not readable (another user's), its port comes from its argv or
``LLAMA_ARG_PORT``, else the defaults are tried. Nothing here starts, loads or wakes anything: the probes are the
read-only requests of ``kvmon.sources.detect``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import psutil

from kvmon.core.jsonvals import text_int
from kvmon.core.locality import is_loopback_host
from kvmon.core.readings import FailureKind, SourceError
from kvmon.sources import detect
from kvmon.sources.backends import LLAMA_SERVER, LLAMA_SWAP, LMSTUDIO, OLLAMA, ROUTER, VLLM
from kvmon.sources.procs import WILDCARD_HOSTS, flag_value, has_flag, program

LOCALHOST = "127.0.0.1"
_MODEL_FLAGS = ("-m", "--model", "-hf", "--hf-repo", "-hfr", "-mu", "--model-url", "-dr", "--docker-repo")
_ROUTER_FLAGS = ("--models-dir", "--models-preset")
LMSTUDIO_PROGRAMS = ("lm studio", "lm-studio", "lmstudio", "llmster")  # the desktop app and its headless daemon


@dataclass(frozen=True)
class ProcessCandidate:
    """A process that looks like a model server: its kind (a hint; the HTTP probe decides) and where it listens."""

    pid: int
    kind: str  # a backend name of kvmon.sources.detect
    ports: tuple[int, ...]  # listening sockets when readable, else from the command line, else the defaults
    host: str = LOCALHOST
    what: str = ""  # a short command line for people
    guessed: bool = False  # no socket or flag said: the ports are the backend's defaults


@dataclass(frozen=True)
class Found:
    """One server found: where, what it is and how kvmon knows it is there."""

    url: str
    backend: str
    how: str  # "process 1234 (llama-server -m qwen3.gguf --port 18080)" or "port 9931"
    pid: int | None = None
    version: str | None = None
    summary: str | None = None
    answering: bool = True
    reason: str | None = None  # why it does not answer (yet), or refuses

    @property
    def label(self) -> str:
        spec = detect.BACKENDS.get(self.backend)
        return spec.label if spec is not None else self.backend


@dataclass(frozen=True)
class Discovery:
    """Every server found (processes first), and what was looked at, for a message when nothing is there."""

    found: tuple[Found, ...] = ()
    looked_at: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def answering(self) -> tuple[Found, ...]:
        return tuple(f for f in self.found if f.answering)


def classify(argv: Sequence[str], environ: dict[str, str] | None = None) -> tuple[str, tuple[int, ...], str] | None:
    """(backend, ports from the command line, host) for a server's argv, or None when it is none of them.

    A llama-server without ``--port`` gets the defaults of both generations (9931, then 8080).
    """
    prog, args = program(argv)
    env = environ or {}
    stem = prog.removesuffix(".py")
    # llama.cpp's server binary was called `server` before mid-2024: that name only with a GGUF to serve
    old_name = stem == "server" and (flag_value(args, ("-m", "--model")) or "").lower().endswith(".gguf")
    if old_name or stem.startswith(("llama-server", "llama_server")):
        port = text_int(flag_value(args, ("--port",))) or text_int(env.get("LLAMA_ARG_PORT"))
        host = flag_value(args, ("--host",)) or env.get("LLAMA_ARG_HOST") or LOCALHOST
        has_model = has_flag(args, _MODEL_FLAGS) or "LLAMA_ARG_MODEL" in env or "LLAMA_ARG_HF_REPO" in env
        kind = ROUTER if (not has_model or has_flag(args, _ROUTER_FLAGS)) else LLAMA_SERVER
        ports = (port,) if port else LLAMA_SERVER.ports  # 9931 (b11549), then 8080 (before, and llama-swap's)
        return kind, ports, host
    if stem.startswith("llama-swap"):
        listen = flag_value(args, ("-listen", "--listen")) or ":8080"  # llama-swap.go: default ":8080"
        host, _, port_text = listen.rpartition(":")
        port = text_int(port_text)
        return LLAMA_SWAP, (port,) if port else LLAMA_SWAP.ports, host.strip("[]") or LOCALHOST
    if (stem == "vllm" and args[:1] == ["serve"]) or (stem == "api_server" and any("vllm" in a for a in argv[:3])):
        port = text_int(flag_value(args, ("--port",)))
        host = flag_value(args, ("--host",)) or LOCALHOST
        return VLLM, (port or VLLM.ports[0],), host
    if stem in LMSTUDIO_PROGRAMS:  # its port is a setting, not a flag: the default, asked over HTTP
        return LMSTUDIO, LMSTUDIO.ports, LOCALHOST
    if stem == "ollama" and args[:1] == ["serve"]:
        hostport = env.get("OLLAMA_HOST", "")
        port = text_int(hostport.rpartition(":")[2]) if ":" in hostport else None
        return OLLAMA, (port or OLLAMA.ports[0],), LOCALHOST
    return None


def _listening(proc: psutil.Process) -> tuple[tuple[int, ...], str | None]:
    """(ports, host) the process listens on, when its sockets are readable; ((), None) otherwise."""
    try:
        getter = getattr(proc, "net_connections", None) or proc.connections
        conns = getter(kind="tcp")
    except (psutil.Error, OSError):
        return (), None
    ports: list[int] = []
    host: str | None = None
    for c in conns:
        if c.status == psutil.CONN_LISTEN and c.laddr:
            if c.laddr.port not in ports:
                ports.append(c.laddr.port)
            host = host or c.laddr.ip
    return tuple(sorted(ports)), host


def _short(argv: Sequence[str]) -> str:
    prog, args = program(argv)
    keep: list[str] = [prog]
    for flags in (("-m", "--model"), ("--models-dir",), ("--models-preset",), ("--port",), ("-listen", "--listen")):
        v = flag_value(args, flags)
        if v is not None:
            keep += [flags[-1], os.path.basename(v) if flags[0] in ("-m", "--models-dir") else v]
    if prog == "ollama":
        keep.append("serve")
    return " ".join(keep)


def _ollamas_own(argv: Sequence[str]) -> bool:
    """A llama-server with the whole command line Ollama gives its model server (its log flags included): read
    through Ollama (found on its own port), not listed alone, even when its parent cannot be read."""
    from kvmon.sources.ollama.child import classify_child

    return classify_child(argv)[0] == "model" and "--no-log-prefix" in argv and "--no-log-timestamps" in argv


def scan_processes(process_iter: Callable[[], Iterable[psutil.Process]] | None = None) -> list[ProcessCandidate]:
    """Every llama-server, router, llama-swap and ``ollama serve`` process readable here, children left out."""
    it = process_iter or (lambda: psutil.process_iter(["pid", "ppid", "cmdline"]))
    matched: dict[int, tuple[psutil.Process, str, tuple[int, ...], str, list[str]]] = {}
    for proc in it():
        try:
            argv = proc.info.get("cmdline") if hasattr(proc, "info") else proc.cmdline()
        except (psutil.Error, OSError):
            continue
        if not argv:
            continue
        env: dict[str, str] = {}
        prog = program(argv)[0]
        if "llama" in prog or prog in ("ollama", "server"):
            try:
                env = {k: v for k, v in proc.environ().items() if k.startswith(("LLAMA_ARG_", "OLLAMA_HOST"))}
            except (psutil.Error, OSError):
                env = {}
        classified = classify(argv, env)
        if classified is not None and not _ollamas_own(argv):
            matched[proc.pid] = (proc, *classified, list(argv))
    out: list[ProcessCandidate] = []
    for _pid, (proc, kind, argv_ports, host, argv) in matched.items():
        try:
            ancestors = {p.pid for p in proc.parents()[:4]}
        except (psutil.Error, OSError):
            ancestors = set()
        if ancestors & set(matched):
            continue  # Ollama's, llama-swap's or a router's own llama-server: read through its parent
        ports, bound = _listening(proc)
        if bound and bound not in WILDCARD_HOSTS:
            host = bound
        elif host in WILDCARD_HOSTS or not host:
            host = LOCALHOST
        guessed = not ports and ((argv_ports == LLAMA_SERVER.ports and kind in (LLAMA_SERVER, ROUTER))
                                 or kind == LMSTUDIO)
        out.append(ProcessCandidate(proc.pid, kind, ports or argv_ports, host, _short(argv), guessed=guessed))
    return sorted(out, key=lambda c: c.pid)


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _probe(url: str, hint: str | None, how: str, pid: int | None, api_key: str | None, timeout_s: float) -> Found:
    try:
        ident = detect.identify(url, api_key, timeout_s, summary=True)
    except SourceError as e:
        kind = e.failure.kind
        backend = hint or detect.backend_by_port(url)
        answering = kind in (FailureKind.AUTH_REJECTED, FailureKind.MODEL_LOADING)
        return Found(url, backend, how, pid, answering=answering, reason=e.failure.reason)
    return Found(url, ident.backend, how, pid, ident.version, ident.summary)


def discover(*, api_key: str | None = None, timeout_s: float = 1.0, ports: Sequence[int] | None = None,
             processes: bool = True, host: str = LOCALHOST,
             process_iter: Callable[[], Iterable[psutil.Process]] | None = None) -> Discovery:
    """Every server on this machine: processes first (any port), then ``ports`` (default: every backend's own).

    A port where nothing answers is not listed; a process that does not answer is (with the reason). Servers that
    answer as something kvmon does not read (vLLM, another OpenAI-compatible one) are listed as such.
    """
    cands: list[tuple[str, str | None, str, int | None, bool]] = []  # (url, hint, how, pid, port guessed)
    seen: set[tuple[str, int]] = set()
    notes: list[str] = []
    looked: list[str] = []
    if processes:
        try:
            found = scan_processes(process_iter)
        except (psutil.Error, OSError) as e:
            found = []
            notes.append(f"the process table could not be read ({type(e).__name__})")
        looked.append("the process table")
        for c in found:
            for port in c.ports:
                key = ("local" if is_loopback_host(c.host) else c.host, port)
                if key in seen:
                    continue
                seen.add(key)
                cands.append((_url(c.host, port), c.kind, f"process {c.pid} ({c.what})", c.pid, c.guessed))
    for port in (detect.WELL_KNOWN_PORTS if ports is None else ports):
        if ("local", port) in seen:
            continue
        seen.add(("local", port))
        cands.append((_url(host, port), None, f"port {port}", None, True))
    looked.append("127.0.0.1 port " + ", ".join(str(p) for p in (detect.WELL_KNOWN_PORTS if ports is None
                                                                   else ports)))
    if not cands:
        return Discovery((), tuple(looked), tuple(notes))
    with ThreadPoolExecutor(max_workers=min(8, len(cands)), thread_name_prefix="kvmon-discover") as pool:
        results = list(pool.map(lambda c: _probe(c[0], c[1], c[2], c[3], api_key, timeout_s), cands))
    # a port nobody listens on is no server; a process that does not answer (yet) still is one, once
    kept: list[Found] = []
    for f, cand in zip(results, cands, strict=True):
        if f.answering:
            kept.append(f)
        elif f.pid is not None and not any(k.pid == f.pid for k in kept) and not (
                cand[4] and any(g.pid == f.pid and g.answering for g in results)):
            kept.append(f)
    return Discovery(tuple(kept), tuple(looked), tuple(notes))


def nothing_found_reason(d: Discovery) -> str:
    """The one line said when no server answers."""
    return ("no llama-server, router, llama-swap, Ollama, vLLM or LM Studio found: looked at "
            + " and ".join(d.looked_at) + "; give a URL, or try --demo")
