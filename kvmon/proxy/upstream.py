"""The proxy's upstream: where it forwards, how it connects, and which server it is (for the cached-prompt rule).

The proxy asks the upstream's ``/api/version`` once it starts (and again every few seconds until one answers):
Ollama answers with its version, llama-server with 404 (an "other" upstream).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

from kvmon.core.versions import parse_version
from kvmon.proxy.framing import MAX_HEAD_BYTES, READ_SIZE, ChunkedDecoder, read_head

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
        writer.write(
            f"GET {upstream.prefix}/api/version HTTP/1.1\r\nHost: {host}:{upstream.port}\r\n"
            "User-Agent: kvmon-proxy\r\nAccept: application/json\r\nConnection: close\r\n\r\n".encode()
        )
        await writer.drain()
        head = await read_head(reader)
        if head is None:
            return None
        te, cl = head.get("transfer-encoding"), head.get("content-length")
        if te and "chunked" in te.lower():
            dec, body = ChunkedDecoder(), b""
            while not dec.done and len(body) < PROBE_MAX_BODY_BYTES:
                data = await reader.read(READ_SIZE)
                if not data:
                    break
                body += dec.feed(data)
        elif cl and cl.strip().isdigit():
            body = await reader.readexactly(min(int(cl), PROBE_MAX_BODY_BYTES))
        else:
            body = await reader.read(PROBE_MAX_BODY_BYTES)
    finally:
        writer.close()
    parts = head.first_line.split(" ", 2)
    version = None
    if len(parts) > 1 and parts[1] == "200":
        with contextlib.suppress(ValueError, UnicodeDecodeError):
            obj = json.loads(body)
            if isinstance(obj, dict) and isinstance(obj.get("version"), str):
                version = obj["version"]
    vt = parse_version(version)
    return ("ollama", version, vt) if vt is not None else ("other", None, None)
