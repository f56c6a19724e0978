"""The llama-server process behind a URL's port, when the server runs on this machine: found (psutil), kept while it
lives, and what its command line and ``LLAMA_ARG_*`` environment say that no endpoint does (cache types, flash
attention, context, slots, layers); read once per process.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping

import psutil

from kvmon.core.readings import ServerConfig
from kvmon.sources import procs
from kvmon.sources.llamacpp.args import parse_llama_server_args

PROCESS_RECHECK_S = 30.0  # how often a server that was not found is looked for again
PROCESS_ALIVE_CHECK_S = 5.0  # how often the known server process is checked to be still the same one


def looks_like_llama_server(argv: list[str], env: Mapping[str, str] | None) -> bool:
    """Whether a command line is a llama.cpp server (its program name, or a model flag in argv/env)."""
    if not argv:
        return False
    prog = os.path.basename(argv[0]).lower()
    if "llama" in prog or "server" in prog:
        return True
    if env and "LLAMA_ARG_MODEL" in env:
        return True
    args = argv[1:]
    return procs.has_flag(args, ("-hf", "--hf-repo")) or (
        procs.flag_value(args, ("-m", "--model")) or "").lower().endswith(".gguf")


class LlamaServerProcess:
    """The local process listening on ``port`` (None when the server is elsewhere, or not to be inspected)."""

    def __init__(self, host: str | None, port: int, *, inspect: bool = True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.host = host
        self.port = port
        self.inspect = inspect
        self._clock = clock
        self._proc: psutil.Process | None = None
        self._checked_at: float | None = None  # when it was last looked for
        self._alive_at = 0.0  # when the known process was last seen running
        self._reason: str | None = None  # why none was found
        self._cwd: tuple[psutil.Process, str | None] | None = None  # the found process's working directory
        self._facts: tuple[tuple[int, float | None], tuple[ServerConfig | None, tuple[int, ...],
                                                           dict[str, str]]] | None = None

    def process(self) -> psutil.Process | None:
        """The process behind the URL's port when the server runs here (cached, looked for again every 30 s)."""
        if not self.inspect or not procs.is_local_host(self.host):
            return None
        now = self._clock()
        if self._proc is not None:
            if now - self._alive_at < PROCESS_ALIVE_CHECK_S:
                return self._proc
            with contextlib.suppress(psutil.Error):
                if self._proc.is_running():  # reads /proc: not on every poll
                    self._alive_at = now
                    return self._proc
            self._proc = None
            self._checked_at = None
        if self._checked_at is not None and now - self._checked_at < PROCESS_RECHECK_S:
            return None
        self._checked_at = now
        self._proc, self._reason = procs.lookup_listening_process(self.port)
        return self._proc

    def identity(self) -> tuple[int, float] | None:
        """(pid, start time) of the server process found here: another one is another start of the server."""
        proc = self.process()
        if proc is None:
            return None
        try:
            return proc.pid, proc.create_time()  # psutil keeps the start time it read when it found the process
        except psutil.Error:
            return None

    def cwd(self) -> str | None:
        """The server's working directory (to resolve a relative ``-m``), or None; read once per process."""
        proc = self.process()
        if proc is None:
            return None
        if self._cwd is None or self._cwd[0] is not proc:
            self._cwd = (proc, procs.process_cwd(proc))
        return self._cwd[1]

    def config(self) -> tuple[ServerConfig | None, tuple[int, ...], dict[str, str]]:
        """(what the server's argv/environment say, its pids, reasons): the command-line layer of the config."""
        proc = self.process()
        if proc is not None:
            return self._process_facts(proc)
        if not self.inspect:
            return None, (), {}
        if not procs.is_local_host(self.host):
            return None, (), {"config.process": "server is not on this machine: KV type, flash attention and "
                                                "layers come from --log or settings"}
        return None, (), {"config.process": self._reason} if self._reason else {}

    def _process_facts(self, proc: psutil.Process) -> tuple[ServerConfig | None, tuple[int, ...], dict[str, str]]:
        """Config from the server process's argv/environment, and its pids; cached per process."""
        key = (proc.pid, self._checked_at)
        if self._facts is not None and self._facts[0] == key:
            return self._facts[1]
        reasons: dict[str, str] = {}
        config: ServerConfig | None = None
        pids: tuple[int, ...] = ()
        argv, why = procs.process_cmdline(proc)
        env, ewhy = procs.process_environ(proc)
        if argv is not None and not looks_like_llama_server(argv, env):
            reasons["config.process"] = (
                f"the process on port {self.port} ({os.path.basename(argv[0]) if argv else '?'}) "
                "does not look like llama-server; its command line is not used"
            )
        elif argv is not None:
            config = parse_llama_server_args(argv[1:], env or {}).config
            pids = procs.process_tree_pids(proc.pid)
            if ewhy:
                reasons["config.environment"] = ewhy
        elif why:
            reasons["config.process"] = why
        facts = (config, pids, reasons)
        self._facts = (key, facts)
        return facts
