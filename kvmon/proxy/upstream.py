"""The proxy's upstream: where it forwards, how it connects, and which server it is (for the cached-prompt rule).

The proxy asks the upstream's ``/api/version`` once it starts (and again every few seconds until one answers):
Ollama answers with its version, llama-server with 404 (an "other" upstream).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

import h11

from kvmon.core.jsonvals import InputError, json_str, parse_json
from kvmon.core.versions import parse_version
from kvmon.proxy.framing import MAX_HEAD_BYTES, MessageReader

DEFAULT_UPSTREAM = "http://127.0.0.1:11434"
PROBE_MAX_BODY_BYTES = 65536


@dataclass(frozen=True)
class Upstream:
    """Where the proxy forwards to: ``--upstream`` parsed (no credentials: the client sends its own)."""

    scheme: str
    host: str
    port: int
    prefix: str

    @classmethod
    def parse(cls, url: str) -> Upstream:
        """``http://host:port/prefix`` (scheme optional); ValueError saying what is wrong."""
        raw = url.strip()
        if "://" not in raw:
            raw = "http://" + raw
        parts = urlsplit(raw)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"--upstream {url!r}: use http:// or https://")
        if not parts.hostname:
            raise ValueError(f"--upstream {url!r}: no host")
        try:
            port = parts.port
        except ValueError:
            raise ValueError(f"--upstream {url!r}: bad port") from None
        if parts.username or parts.password:
            raise ValueError("--upstream must not carry credentials (send them from the client)")
        return cls(parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80),
                   parts.path.rstrip("/"))

    @property
    def url(self) -> str:
        """The upstream's URL as the proxy shows it."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.prefix}"


async def connect(upstream: Upstream, tls: ssl.SSLContext | None) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A new connection to the upstream (TLS when ``tls`` is given)."""
    return await asyncio.open_connection(
        upstream.host, upstream.port, ssl=tls, limit=MAX_HEAD_BYTES,
        server_hostname=upstream.host if tls else None,
    )


async def probe_version(upstream: Upstream, tls: ssl.SSLContext | None) -> tuple[str, str | None,
                                                                                  tuple[int, ...] | None] | None:
    """Ask ``/api/version``: ("ollama", version, parsed) for an Ollama, ("other", None, None) for anything else
    that answers, None when the connection closed before a head. Raises OSError / ProtocolError on the way."""
    reader, writer = await connect(upstream, tls)
    try:
        host = f"[{upstream.host}]" if ":" in upstream.host else upstream.host
        request = h11.Request(method="GET", target=f"{upstream.prefix}/api/version",
                              headers=[("Host", f"{host}:{upstream.port}"), ("User-Agent", "kvmon-proxy"),
                                       ("Accept", "application/json"), ("Connection", "close")])
        sender = h11.Connection(h11.CLIENT)
        writer.write(sender.send(request) + sender.send(h11.EndOfMessage()))
        await writer.drain()
        messages = MessageReader(reader)
        messages.expect_response(request, request_sent=True)
        head = await messages.response_head()
        while head is not None and 100 <= head.status < 200:
            head = await messages.response_head()
        if head is None:
            return None
        body = bytearray()
        async for _, payload in messages.body():
            body += payload
            if len(body) > PROBE_MAX_BODY_BYTES:
                break
    finally:
        writer.close()
    version = None
    if head.status == 200:
        with contextlib.suppress(InputError):
            obj = parse_json(bytes(body[:PROBE_MAX_BODY_BYTES]))
            if isinstance(obj, dict):
                version = json_str(obj.get("version"))
    vt = parse_version(version)
    return ("ollama", version, vt) if vt is not None else ("other", None, None)
