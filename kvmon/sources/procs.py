"""This machine's processes (psutil): the one behind a listening port, its command line, environment and cwd, its
process tree, and whether a host name is this machine.

A server on this machine tells, through its own argv and ``LLAMA_ARG_*`` environment, what no endpoint
does. Other users' processes are often unreadable: every helper returns ``None`` plus a reason then. The
server sources, the GPU source and the host source all ask here (one rule for "local", one process tree).
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING

import psutil

from kvmon.core.locality import is_loopback_host

if TYPE_CHECKING:
    from psutil._ntuples import sconn  # psutil.net_connections()'s rows (types-psutil)

WILDCARD_HOSTS = frozenset({"0.0.0.0", "::"})  # a server listening on every interface, reached here
_INTERPRETER = re.compile(r"^(python[0-9.]*|pypy[0-9.]*|node|bun|deno)(\.exe)?$")


def _basename(path: str) -> str:
    """The last part of a path written with / or \\ (a Windows command line read anywhere), lower-cased."""
    return re.split(r"[\\/]", path)[-1].lower()


def program(argv: Sequence[str]) -> tuple[str, list[str]]:
    """(program name, its arguments) of a command line, lower-cased, without ``.exe``: ``python llama_server.py -m x``
    is the script, not the interpreter (``python -m pkg.mod`` is ``mod``)."""
    if not argv:
        return "", []
    base = _basename(str(argv[0]))
    if _INTERPRETER.match(base):
        rest = [str(a) for a in argv[1:]]
        while rest and rest[0].startswith("-") and rest[0] != "-m":
            rest.pop(0)
        if rest and rest[0] == "-m" and len(rest) > 1:
            return rest[1].rsplit(".", 1)[-1].lower(), rest[2:]
        if rest:
            return _basename(rest[0]), rest[1:]
    return base.removesuffix(".exe"), [str(a) for a in argv[1:]]


def flag_value(args: Sequence[str], flags: Sequence[str]) -> str | None:
    """The value of the first of ``flags`` in a command line (``--flag value`` or ``--flag=value``), or None."""
    for i, a in enumerate(args):
        flag, eq, inline = a.partition("=")
        if flag in flags:
            if eq:
                return inline
            return args[i + 1] if i + 1 < len(args) else None
    return None


def has_flag(args: Sequence[str], flags: Sequence[str]) -> bool:
    """Whether a command line gives one of ``flags`` (with a value or without)."""
    return any(a.partition("=")[0] in flags for a in args)


def _listening_on(conns: Sequence[sconn], port: int) -> tuple[int | None, bool]:
    """(pid, seen): the pid listening on ``port`` in ``conns``, and whether any listener was seen."""
    seen = False
    for c in conns:
        if c.status != psutil.CONN_LISTEN or not c.laddr or c.laddr.port != port:
            continue
        seen = True
        if c.pid:
            return c.pid, True
    return None, seen


def lookup_listening_process(port: int) -> tuple[psutil.Process | None, str | None]:
    """The process listening on TCP ``port`` on this machine, or (None, why not)."""
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, PermissionError, OSError):
        conns = None
    if conns is not None:
        pid, seen = _listening_on(conns, port)
        if pid:
            try:
                return psutil.Process(pid), None
            except psutil.Error:
                return None, f"process {pid} listening on port {port} went away"
        if seen:
            return None, f"the process listening on port {port} belongs to another user (not readable)"
    # per-process scan: works without privileges for our own processes (macOS denies the global list)
    denied = False
    for proc in psutil.process_iter():
        try:
            getter = getattr(proc, "net_connections", None) or proc.connections
            pconns = getter(kind="tcp")
        except (psutil.AccessDenied, PermissionError):
            denied = True
            continue
        except (psutil.NoSuchProcess, psutil.ZombieProcess, OSError):
            continue
        if any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in pconns):
            return proc, None
    if denied:
        return None, f"no readable process listens on port {port} (some processes are not readable)"
    return None, f"no process on this machine listens on port {port}"


def find_listening_process(port: int) -> psutil.Process | None:
    """The process listening on TCP ``port``, or None (not found, or not readable)."""
    return lookup_listening_process(port)[0]


def process_tree_pids(pid: int) -> tuple[int, ...]:
    """``pid`` and all its descendants (a server's GPU memory may sit in a child); () when gone."""
    try:
        proc = psutil.Process(pid)
        return (proc.pid, *(c.pid for c in proc.children(recursive=True)))
    except psutil.Error:
        return ()


def process_cmdline(proc: psutil.Process) -> tuple[list[str] | None, str | None]:
    """The process's argv, or (None, reason)."""
    try:
        return list(proc.cmdline()), None
    except psutil.AccessDenied:
        return None, f"command line of process {proc.pid} is not readable (another user)"
    except psutil.Error as e:
        return None, f"command line of process {proc.pid} unavailable ({type(e).__name__})"


def process_environ(proc: psutil.Process) -> tuple[Mapping[str, str] | None, str | None]:
    """The process's environment, or (None, reason). Only ``LLAMA_ARG_*`` keys are kept."""
    try:
        env = proc.environ()
    except psutil.AccessDenied:
        return None, f"environment of process {proc.pid} is not readable (another user)"
    except (psutil.Error, OSError) as e:
        return None, f"environment of process {proc.pid} unavailable ({type(e).__name__})"
    return {k: v for k, v in env.items() if k.startswith("LLAMA_ARG_")}, None


def process_cwd(proc: psutil.Process) -> str | None:
    """The process's working directory (to resolve a relative ``-m``), or None."""
    try:
        return proc.cwd()
    except (psutil.Error, OSError):
        return None


def is_local_host(host: str | None) -> bool:
    """Whether ``host`` names this machine (loopback, wildcard, or one of its interface addresses)."""
    if not host:
        return False
    h = host.strip("[]").lower()
    if is_loopback_host(h) or h in WILDCARD_HOSTS:
        return True
    try:
        if h == socket.gethostname().lower():
            return True
        addrs = {a.address.split("%", 1)[0].lower() for nics in psutil.net_if_addrs().values() for a in nics}
    except (OSError, psutil.Error):
        return False
    return h in addrs


PID_TREE_MAX_AGE_S = 10.0  # a server's process tree is re-read at most this often (psutil reads every process)


class PidTreeCache:
    """``expand_server_pids`` remembered for a few seconds per set of server pids: polls repeat the question.
    ``include_children=False``: the pids as given."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, *, include_children: bool = True) -> None:
        self.include_children = include_children
        self._clock = clock
        self._key: frozenset[int] | None = None
        self._at = 0.0
        self._value: frozenset[int] = frozenset()

    def expand(self, server_pids: Collection[int]) -> frozenset[int]:
        """The pids and their descendants, read again when the pids changed or after PID_TREE_MAX_AGE_S."""
        key = frozenset(int(p) for p in server_pids)
        if not self.include_children:
            return key
        now = self._clock()
        if key != self._key or not (0.0 <= now - self._at < PID_TREE_MAX_AGE_S):
            self._value = expand_server_pids(key)
            self._key, self._at = key, now
        return self._value


def expand_server_pids(server_pids: Collection[int]) -> frozenset[int]:
    """The given pids plus all their descendants (Ollama's llama-server child); a gone pid stays as given."""
    pids = {int(p) for p in server_pids}
    for pid in list(pids):
        pids.update(process_tree_pids(pid))
    return frozenset(pids)
