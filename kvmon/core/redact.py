"""Text without credentials: what every caption, export, report card and recording header passes before it is written.

A shared picture, a CSV or a recording must never carry a user:password, a token in a query string, a bearer
value or an API key, whatever the URL or message it quotes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# user:password@ in a URL, and key/token-like query parameters or header values
_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@")
_QUERY = re.compile(r"(?P<url>[a-zA-Z][a-zA-Z0-9+.-]*://[^\s?#'\"<>]*)\?[^\s#'\"<>]*")
_BEARER = re.compile(r"(?i)\b(bearer|basic(?=\s+[A-Za-z0-9+/=]{8,}))(\s+)[^\s,;'\"<>]+")
# "token: x", "key=x" whatever x is; "token x" only when x looks like a credential (8+ characters of the alphabets
# keys use), so that "first token 0.78 s" and "17.8 ms/token (p95 …)" are left as they are
_KEYVAL = re.compile(r"(?i)\b(api[_-]?key|token|password|passwd|secret|authorization)(\s*[:=]\s*)"
                     r"[^\s,;'\"<>]+")
_KEYWORD_VALUE = re.compile(r"(?i)\b(api[_-]?key|token|password|passwd|secret|authorization)(\s+)"
                            r"(?=[A-Za-z0-9_\-.~+/=]*[A-Za-z])[A-Za-z0-9_\-.~+/=]{8,}")


def scrub(text: str, secrets: Sequence[str] = ()) -> str:
    """``text`` without URL user info, URL query strings, ``key=…``/``Bearer …`` values or any of ``secrets``."""
    out = _USERINFO.sub(lambda m: m.group("scheme"), text)
    out = _QUERY.sub(lambda m: m.group("url"), out)
    out = _BEARER.sub(lambda m: f"{m.group(1)}{m.group(2)}[redacted]", out)
    out = _KEYVAL.sub(lambda m: f"{m.group(1)}{m.group(2)}[redacted]", out)
    out = _KEYWORD_VALUE.sub(lambda m: f"{m.group(1)}{m.group(2)}[redacted]", out)
    for s in secrets:
        if s and len(s) >= 4:
            out = out.replace(s, "[redacted]")
    return out
