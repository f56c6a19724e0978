"""``kvmon proxy --listen HOST:PORT --upstream URL``: the measuring proxy as a command, until SIGTERM or SIGINT
(then its connections are closed, its socket too, and it exits 0)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Callable

from kvmon.app.endings import catchable
from kvmon.core import locality
from kvmon.core.locality import is_loopback_host
from kvmon.proxy import UPSTREAM_TIMEOUT_S
from kvmon.proxy.server import ProxyServer
from kvmon.proxy.stats import STATS_PATH
from kvmon.proxy.upstream import DEFAULT_UPSTREAM

DEFAULT_LISTEN = "127.0.0.1:11435"


def parse_listen(text: str | None) -> tuple[str, int]:
    """``--listen`` of ``kvmon proxy`` (``kvmon.core.locality.parse_listen``): ``":PORT"`` listens on 127.0.0.1."""
    return locality.parse_listen(text, DEFAULT_LISTEN, blank_host="127.0.0.1")


def run(args: argparse.Namespace, *, on_ready: Callable[[ProxyServer], None] | None = None) -> int:
    """``kvmon proxy --listen HOST:PORT --upstream URL``: serve until interrupted; 2 on bad arguments."""
    try:
        host, port = parse_listen(getattr(args, "listen", None) or DEFAULT_LISTEN)
        limit = getattr(args, "upstream_timeout", UPSTREAM_TIMEOUT_S)
        if limit is not None and not limit >= 0:  # also NaN
            raise ValueError(f"--upstream-timeout {limit:g}: give seconds, 0 or more (0: no limit)")
        server = ProxyServer(getattr(args, "upstream", DEFAULT_UPSTREAM) or DEFAULT_UPSTREAM, host=host, port=port,
                             upstream_timeout_s=limit)
    except ValueError as e:
        print(f"kvmon proxy: {e}", file=sys.stderr)
        return 2

    async def main() -> str | None:
        """Serve until asked to stop; why it could not start, if it could not."""
        try:
            await server.start_serving()
        except OSError as e:
            return f"kvmon proxy: cannot listen on {host}:{port} ({e.strerror or e})"
        print(f"kvmon proxy: {server.url} -> {server.upstream.url}; measurements at {server.url}{STATS_PATH}",
              flush=True)
        if not is_loopback_host(host):
            print(f"kvmon proxy: listening on {host}: other machines can reach your model server through it",
                  file=sys.stderr, flush=True)
        if on_ready is not None:
            on_ready(server)
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in catchable():  # asked to stop: connections end, the socket closes, exit 0
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, stopping.set)
        try:
            await stopping.wait()
        finally:
            await server.close()
        return None

    try:
        problem = asyncio.run(main())
    except KeyboardInterrupt:  # where the loop cannot take signals itself
        return 0
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    print("kvmon proxy: stopped", file=sys.stderr, flush=True)
    return 0
