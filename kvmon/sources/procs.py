"""Find the local process behind a listening port and read its command line, environment and cwd (psutil).

A server on this machine tells, through its own argv and ``LLAMA_ARG_*`` environment, what no endpoint
does. Other users' processes are often unreadable: every helper returns ``None`` plus a reason then.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping

import psutil

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0", "::", "ip6-localhost"})


def _listening_on(conns: list, port: int) -> tuple[int | None, bool]:
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
        pids = [proc.pid]
        pids.extend(c.pid for c in proc.children(recursive=True))
        return tuple(pids)
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
    if h in LOOPBACK_NAMES or h.startswith("127."):
        return True
    try:
        if h == socket.gethostname().lower():
            return True
        addrs = {a.address.split("%", 1)[0].lower() for nics in psutil.net_if_addrs().values() for a in nics}
    except (OSError, psutil.Error):
        return False
    return h in addrs
