"""Which server answers at a URL, and every server found on this machine."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvmon.core.readings import FailureKind, SourceError


def detect(url: str, api_key: str | None, timeout_s: float) -> str | None:
    """The backend to open at ``url``, or None when nothing usable answers there (asked once)."""
    from kvmon.sources.detect import backend_by_port, detect_backend

    try:
        backend = detect_backend(url, api_key, timeout_s)
    except SourceError as exc:
        if exc.failure.kind in (FailureKind.AUTH_REJECTED, FailureKind.MODEL_LOADING):
            return backend_by_port(url)  # something is there; its source reports the state
        return None
    return backend if backend and backend != "unknown" else None



def server_labels() -> tuple[str, ...]:
    """Every kind of server kvmon reads, as people name them ("llama-server", "llama-server router", "Ollama", ...)."""
    from kvmon.sources.backends import ALL

    return tuple(b.label for b in ALL if b.label and b.source)


def find_servers(*, api_key: str | None = None, timeout_s: float = 1.0,
                 candidates: Sequence[str] | None = None) -> Any:
    """Every server on this machine (``kvmon.sources.discover.Discovery``): the process table first, then the
    backends' default ports; with ``candidates``, those URLs only, in order."""
    from kvmon.sources import discover

    if candidates is None:
        return discover.discover(api_key=api_key, timeout_s=timeout_s)
    found = []
    for cand in candidates:
        backend = detect(cand, api_key, timeout_s)
        if backend is not None:
            found.append(discover.Found(cand.rstrip("/"), backend, f"given {cand}"))
    return discover.Discovery(tuple(found), (", ".join(candidates),))

