"""Which server answers at a URL, and its source: the backends kvmon reads, each with its detection probe.

A backend is one entry in ``BACKENDS`` (its source module, the ports it listens on by default) and one probe in
``PROBES`` (run in order over one set of answers, each path asked at most once). What only one backend has
decides: llama-server's /props (a router's says ``"role": "router"``; a plain server's ``Server: llama.cpp``
header), llama-swap's /running, Ollama's /api/version, vLLM's /version and ``vllm:`` metrics; a bare /v1/models
means "some OpenAI-compatible server". LM Studio's REST list (``/api/v1/models``, ``/api/v0/models``) is its own.
llama-server's /v1/models also carries an Ollama-looking ``models`` list,
and llama-swap has an /api/version too, so the order matters.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from kvmon.core.backend import Backend
from kvmon.core.deadline import poll_deadline
from kvmon.core.readings import FailureKind, SourceError, SourceFailure
from kvmon.core.sanitize import plain_text
from kvmon.sources.backends import ALL, LLAMA_SERVER, LLAMA_SWAP, LMSTUDIO, OLLAMA, OPENAI, ROUTER, VLLM
from kvmon.sources.http import HttpClient, HttpResponse, decode_json, normalize_base_url, raise_for_status, redact_url

UNKNOWN = "unknown"
_LLAMA_PROPS_KEYS = ("default_generation_settings", "total_slots", "build_info", "model_path")

BACKENDS: Mapping[str, Backend] = {b.name: b for b in ALL}
# where to look when no process on this machine says: in this order, each port once
WELL_KNOWN_PORTS: tuple[int, ...] = tuple(dict.fromkeys(p for b in BACKENDS.values() for p in b.ports))


class Answers:
    """One server's answers to the detection requests: each path is asked at most once, in the order needed."""

    def __init__(self, client: HttpClient) -> None:
        self.client = client
        self._got: dict[str, HttpResponse] = {}
        self.auth_refused: SourceFailure | None = None

    def get(self, path: str) -> HttpResponse:
        """The answer on ``path`` (network failures raise SourceError)."""
        resp = self._got.get(path)
        if resp is None:
            resp = self._got[path] = self.client.get(path)
            if resp.status_code in (401, 403) and self.auth_refused is None:
                self.auth_refused = SourceFailure(FailureKind.AUTH_REJECTED,
                                                  f"API key rejected by {self.client.display_url}", path,
                                                  resp.status_code)
        return resp

    def failure(self) -> SourceFailure | None:
        """When no answer so far was a JSON body of a 2xx status (a gateway whose server died answers every path
        502, an HTML page or nothing): the first answer's failure; else None."""
        first: SourceFailure | None = None
        for path, resp in self._got.items():
            try:
                raise_for_status(resp, path, self.client.display_url)
                decode_json(resp, path)
                return None
            except SourceError as e:
                first = first or e.failure
        return first

    def json(self, path: str, status: int = 200) -> Any:
        """The JSON body on ``path`` when it answered ``status``, else None."""
        resp = self.get(path)
        if resp.status_code != status:
            return None
        try:
            return decode_json(resp, path)
        except SourceError:
            return None


def _is_router(a: Answers) -> bool:
    body = a.json("/props")
    return isinstance(body, Mapping) and body.get("role") == "router"


def _is_llama(a: Answers) -> bool:
    resp = a.get("/props")
    if "llama.cpp" in resp.headers.get("server", "").lower():
        return True
    body = a.json("/props")
    if isinstance(body, Mapping):
        return any(k in body for k in _LLAMA_PROPS_KEYS)
    body = a.json("/props", 503)
    if isinstance(body, Mapping):
        err = body.get("error")
        return isinstance(err, Mapping) and err.get("type") == "unavailable_error"  # "Loading model"
    return False


def _is_llama_swap(a: Answers) -> bool:
    # internal/server/api.go handleRunning: {"running": [...]}; with apiKeys its 401 names the realm (auth.go)
    resp = a.get("/running")
    if resp.status_code in (401, 403):
        return "llama-swap" in resp.headers.get("www-authenticate", "").lower()
    body = a.json("/running")
    return isinstance(body, Mapping) and isinstance(body.get("running"), list)


def _is_ollama(a: Answers) -> bool:
    body = a.json("/api/version")
    return isinstance(body, Mapping) and isinstance(body.get("version"), str)


def _is_lmstudio(a: Answers) -> bool:
    # REST v1 (0.4+): {"models": [{"key", "loaded_instances", ...}]}; REST v0 (0.3.6+): data[] with
    # compatibility_type and state (lmstudio-ai/docs 1_developer/2_rest/list.md, endpoints.mdx)
    body = a.json("/api/v1/models")
    models = body.get("models") if isinstance(body, Mapping) else None
    if isinstance(models, list) and all(isinstance(m, Mapping) and "key" in m for m in models):
        return True
    body = a.json("/api/v0/models")
    data = body.get("data") if isinstance(body, Mapping) else None
    return isinstance(data, list) and bool(data) and all(
        isinstance(m, Mapping) and "compatibility_type" in m and "state" in m for m in data)


def _is_vllm(a: Answers) -> bool:
    body = a.json("/version")
    if isinstance(body, Mapping) and "version" in body:
        return True
    resp = a.get("/metrics")
    return resp.status_code == 200 and "vllm:" in resp.text[:200_000]


def _v1_owner(a: Answers) -> str | None:
    body = a.json("/v1/models")
    if not isinstance(body, Mapping) or not isinstance(body.get("data"), list):
        return None
    data = body["data"]
    return str(data[0].get("owned_by") or "") if data and isinstance(data[0], Mapping) else ""


def _is_openai(a: Answers) -> bool:
    return _v1_owner(a) is not None


# In order: the first that holds names the backend. /v1/models answers for a proxy in front of any of them, so its
# owner decides between llama-server, llama-swap, vLLM and "some OpenAI-compatible server" last.
PROBES: tuple[tuple[Backend, Callable[[Answers], bool]], ...] = (
    (ROUTER, _is_router),  # llama-server started without a model: it loads models on demand, one child each
    (LLAMA_SERVER, _is_llama),
    (LLAMA_SWAP, _is_llama_swap),
    (LMSTUDIO, _is_lmstudio),
    (OLLAMA, _is_ollama),
    (VLLM, _is_vllm),
    (LLAMA_SERVER, lambda a: _v1_owner(a) == "llamacpp"),
    (LLAMA_SWAP, lambda a: _v1_owner(a) == "llama-swap"),
    (VLLM, lambda a: _v1_owner(a) == "vllm"),
    (OPENAI, _is_openai),
)


@dataclass(frozen=True)
class Identity:
    """What answers at a URL: the backend, its version and a few words on what it serves (for a list)."""

    backend: str
    version: str | None = None
    summary: str | None = None
    why: str | None = None  # unknown: what the server answered instead (every path failed)


def _summary(backend: Backend, a: Answers) -> tuple[str | None, str | None]:
    """(version, summary) from the answers the probes already have (one more request at most)."""
    if backend.summary is None:
        return None, None
    try:
        summary: tuple[str | None, str | None] = _named(backend.summary)(a.json)
        return summary
    except SourceError:
        return None, None


def identify(url: str, api_key: str | None = None, timeout_s: float = 3.0, *, summary: bool = False) -> Identity:
    """The backend at ``url`` (and, with ``summary``, its version and what it serves); raises SourceError when
    nothing answers (UNREACHABLE / TIMEOUT / BAD_URL) or the server rejects the key on every probe. Every probe
    shares one deadline, ``timeout_s``."""
    client = HttpClient(normalize_base_url(url), api_key=api_key, timeout_s=timeout_s)
    try:
        with poll_deadline(timeout_s):
            a = Answers(client)
            a.get("/props")  # a network failure here means nothing is there: raise
            for backend, probe in PROBES:
                if probe(a):
                    version, words = _summary(backend, a) if summary else (None, None)
                    return Identity(backend, version, plain_text(words) if words else None)
            if a.auth_refused is not None:
                raise SourceError(a.auth_refused)
            failed = a.failure()
            if failed is not None and (failed.status_code or 0) >= 500:  # a gateway whose server died: a failure
                raise SourceError(failed)
            return Identity(UNKNOWN, why=failed.reason if failed is not None else None)
    finally:
        client.close()


def detect_backend(url: str, api_key: str | None = None, timeout_s: float = 3.0) -> str:
    """The backend name at ``url`` (see ``BACKENDS``, or "unknown"); raises SourceError as ``identify`` does."""
    return identify(url, api_key, timeout_s).backend


def backend_by_port(url: str) -> str:
    """The backend a URL's port suggests (11434: Ollama, 8000: vLLM, 1234: LM Studio), for a server that does not
    answer yet."""
    port = urlsplit(normalize_base_url(url)).port
    return {b.ports[0]: b for b in (OLLAMA, VLLM, LMSTUDIO)}.get(port or 0, LLAMA_SERVER)


def _named(ref: str) -> Any:
    """What a backend's ``"module:name"`` names (imported only when asked: ``kvmon --version`` loads no source)."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def source_class(backend: Backend) -> Any:
    """The class that reads ``backend``."""
    if backend.source is None:
        raise ValueError(f"kvmon has no source for {backend.label}")
    return _named(backend.source)


def open_source(
    url: str,
    *,
    api_key: str | None = None,
    timeout_s: float = 3.0,
    log_path: str | None = None,
    backend: str | None = None,
) -> Any:
    """A source for ``url``: detected, or by port (11434 = Ollama) when the server does not answer yet.

    A llama-server router or llama-swap gives a model-list source (``kvmon.sources.base.ModelListSource``), the
    others a ``ServerSource``. Raises SourceError for a bad URL, or for a server kvmon cannot read (vLLM, other
    OpenAI-compatible).
    """
    normalize_base_url(url)  # BAD_URL raises here
    why = None
    if backend is None:
        try:
            found = identify(url, api_key, timeout_s)
            backend, why = found.backend, found.why
        except SourceError as e:
            if e.failure.kind == FailureKind.BAD_URL:
                raise
            # down, hanging, loading or refusing the key: pick by port and let polls report the state
            backend = backend_by_port(url)
    spec = BACKENDS.get(backend)
    if spec is None or spec.source is None:
        shown = redact_url(normalize_base_url(url))
        what = f"{spec.label}" if spec is not None else "not a server kvmon knows" + (f" ({why})" if why else "")
        raise SourceError(SourceFailure(
            FailureKind.UNEXPECTED_BODY,
            f"{shown} is {what}; kvmon reads llama-server (and its router mode), llama-swap, Ollama, vLLM and "
            "LM Studio"))
    cls = source_class(spec)
    kwargs: dict[str, Any] = {"api_key": api_key, "timeout_s": timeout_s}
    if log_path is not None and "log_path" in inspect.signature(cls).parameters:  # a server whose log kvmon reads
        kwargs["log_path"] = log_path
    return cls(url, **kwargs)
