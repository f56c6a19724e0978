"""``--listen HOST:PORT`` for the commands that serve (``kvmon serve``, ``kvmon proxy``): one parser, one rule.

``HOST:PORT``, ``[IPv6]:PORT`` or a bare ``PORT`` (on 127.0.0.1); port 0 asks the system for a free port.
Anything else is refused with a reason that says what to write. Also the one test of "only this machine can
reach it" (a loopback address), for the warning a command gives when it listens wider.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from urllib.parse import urlsplit

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "ip6-localhost"})


class ListenAddressError(ValueError):
    """A ``--listen`` value that is not ``HOST:PORT``, ``[IPv6]:PORT`` or ``PORT``."""


def parse_listen(text: str | None, default: str, *, blank_host: str | None = None) -> tuple[str, int]:
    """``"127.0.0.1:9464"`` → ``("127.0.0.1", 9464)``; ``None`` → ``default``; raises ListenAddressError.

    ``":PORT"`` (no host) is refused, since it reads as "every interface" to some and "this machine" to others,
    unless the command names the host it means (``blank_host``).
    """
    raw = (text if text is not None else default).strip()
    if not raw:
        raise ListenAddressError(f"empty --listen address: give HOST:PORT, e.g. {default}")
    if raw.startswith("["):
        host, sep, port_text = raw[1:].partition("]:")
        if not sep:
            raise ListenAddressError(f"bad --listen address {raw!r}: an IPv6 address is written [ADDR]:PORT")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ListenAddressError(f"bad --listen address {raw!r}: {host!r} is not an IPv6 address") from None
    elif ":" in raw:
        host, _, port_text = raw.rpartition(":")
        if ":" in host:
            raise ListenAddressError(f"bad --listen address {raw!r}: write an IPv6 address as [ADDR]:PORT")
        if not host:
            if blank_host is None:
                raise ListenAddressError(f"bad --listen address {raw!r}: no host; use 0.0.0.0:PORT for every "
                                         "interface")
            host = blank_host
    else:
        host, port_text = "127.0.0.1", raw
    if not (port_text.isascii() and port_text.isdigit()):
        raise ListenAddressError(f"bad --listen address {raw!r}: port {port_text!r} is not a number")
    port = int(port_text)
    if port > 65535:
        raise ListenAddressError(f"bad --listen address {raw!r}: port {port} is above 65535")
    if any(c.isspace() or c in "/?#@" for c in host):
        raise ListenAddressError(f"bad --listen address {raw!r}: {host!r} is not a host name or address")
    return host, port


def is_loopback_host(host: str | None) -> bool:
    """Whether only this machine can reach ``host`` (a loopback name or address; not the wildcard 0.0.0.0)."""
    if not host:
        return False
    h = host.strip("[]").lower()
    return h in LOOPBACK_NAMES or h.startswith("127.")


def server_here(url: str, server_pids: Sequence[int]) -> bool:
    """Whether the server at ``url`` runs on this machine: its processes were found, or it listens on loopback."""
    if server_pids:
        return True
    try:
        return is_loopback_host(urlsplit(url).hostname)
    except ValueError:  # a URL the source took but this cannot split: not known to be here
        return False


def host_header_allowed(host_header: str | None) -> bool:
    """Whether a server listening on loopback answers a request with this ``Host`` header: a loopback name or
    address, or this machine's own name (any port), so that a web page's script cannot reach it under a name of
    its own that resolves to 127.0.0.1 (DNS rebinding). A request without one (HTTP/1.0) comes from no browser."""
    if host_header is None:
        return True
    h = host_header.strip()
    host = h[1:h.find("]")] if h.startswith("[") and "]" in h else (h.rsplit(":", 1)[0] if h.count(":") == 1 else h)
    host = host.rstrip(".").lower()
    if host in LOOPBACK_NAMES or host.endswith(".localhost") or host == socket.gethostname().lower():
        return True  # (``*.localhost`` is loopback by RFC 6761; this machine's own name maps to 127.0.1.1 on Debian)
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name: only the loopback names above (a name like 127.0.0.1.example.com is a name)
        return False
