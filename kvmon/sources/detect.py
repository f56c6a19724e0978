"""Which server answers at a URL (llama-server, Ollama, vLLM, another OpenAI-compatible one), and its source.

llama-server's /v1/models also carries an Ollama-looking ``models`` list, so the answer rests on what
only one backend has: llama-server's /props (and its ``Server: llama.cpp`` header), Ollama's
/api/version, vLLM's /version and ``vllm:`` metrics; a bare /v1/models means "some OpenAI-compatible
server".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from kvmon.core.readings import FailureKind, SourceError, SourceFailure
from kvmon.sources.base import ServerSource
from kvmon.sources.http import HttpClient, HttpResponse, decode_json, normalize_base_url, redact_url

LLAMA_SERVER = "llama-server"
OLLAMA = "ollama"
VLLM = "vllm"
OPENAI = "openai"
UNKNOWN = "unknown"

OLLAMA_PORT = 11434
_LLAMA_PROPS_KEYS = ("default_generation_settings", "total_slots", "build_info", "model_path")


def _json(resp: HttpResponse, path: str) -> Any:
    try:
        return decode_json(resp, path)
    except SourceError:
        return None


def _is_llama(resp: HttpResponse) -> bool:
    if "llama.cpp" in resp.headers.get("server", "").lower():
        return True
    body = _json(resp, "/props")
    if resp.status_code == 200 and isinstance(body, Mapping):
        return any(k in body for k in _LLAMA_PROPS_KEYS)
    if resp.status_code == 503 and isinstance(body, Mapping):
        err = body.get("error")
        return isinstance(err, Mapping) and err.get("type") == "unavailable_error"  # "Loading model"
    return False


def detect_backend(url: str, api_key: str | None = None, timeout_s: float = 3.0) -> str:
    """"llama-server" | "ollama" | "vllm" | "openai" | "unknown"; raises SourceError when nothing answers.

    Network failures raise (UNREACHABLE / TIMEOUT / BAD_URL); a server that rejects the key on every
    probe raises AUTH_REJECTED.
    """
    base = normalize_base_url(url)
    client = HttpClient(base, api_key=api_key, timeout_s=timeout_s)
    auth_refused: SourceFailure | None = None
    try:
        resp = client.get("/props")  # network failure here means nothing is there: raise
        if _is_llama(resp):
            return LLAMA_SERVER
        if resp.status_code in (401, 403):
            auth_refused = SourceFailure(FailureKind.AUTH_REJECTED, f"API key rejected by {client.display_url}",
                                         "/props", resp.status_code)
        resp = client.get("/api/version")
        body = _json(resp, "/api/version")
        if resp.status_code == 200 and isinstance(body, Mapping) and isinstance(body.get("version"), str):
            return OLLAMA
        resp = client.get("/version")
        body = _json(resp, "/version")
        if resp.status_code == 200 and isinstance(body, Mapping) and "version" in body:
            return VLLM
        resp = client.get("/metrics")
        if resp.status_code == 200 and "vllm:" in resp.text[:200_000]:
            return VLLM
        resp = client.get("/v1/models")
        body = _json(resp, "/v1/models")
        if resp.status_code == 200 and isinstance(body, Mapping) and isinstance(body.get("data"), list):
            data = body["data"]
            if data and isinstance(data[0], Mapping) and data[0].get("owned_by") == "llamacpp":
                return LLAMA_SERVER
            if data and isinstance(data[0], Mapping) and data[0].get("owned_by") == "vllm":
                return VLLM
            return OPENAI
        if resp.status_code in (401, 403) and auth_refused is None:
            auth_refused = SourceFailure(FailureKind.AUTH_REJECTED, f"API key rejected by {client.display_url}",
                                         "/v1/models", resp.status_code)
        if auth_refused is not None:
            raise SourceError(auth_refused)
        return UNKNOWN
    finally:
        client.close()


def backend_by_port(url: str) -> str:
    """The backend a URL's port suggests (11434: Ollama), for a server that does not answer yet."""
    port = urlsplit(normalize_base_url(url)).port
    return OLLAMA if port == OLLAMA_PORT else LLAMA_SERVER


def open_source(
    url: str,
    *,
    api_key: str | None = None,
    timeout_s: float = 3.0,
    log_path: str | None = None,
    backend: str | None = None,
) -> ServerSource:
    """A source for ``url``: detected, or by port (11434 = Ollama) when the server does not answer yet.

    Raises SourceError for a bad URL, or for a server kvmon cannot read (vLLM, other OpenAI-compatible).
    """
    normalize_base_url(url)  # BAD_URL raises here
    if backend is None:
        try:
            backend = detect_backend(url, api_key, timeout_s)
        except SourceError as e:
            if e.failure.kind == FailureKind.BAD_URL:
                raise
            # down, hanging, loading or refusing the key: pick by port and let polls report the state
            backend = backend_by_port(url)
    if backend == LLAMA_SERVER:
        from kvmon.sources.llamacpp import LlamaServerSource

        return LlamaServerSource(url, api_key=api_key, timeout_s=timeout_s, log_path=log_path)
    if backend == OLLAMA:
        from kvmon.sources.ollama import OllamaSource

        return OllamaSource(url, api_key=api_key, timeout_s=timeout_s)
    shown = redact_url(normalize_base_url(url))
    what = {VLLM: "a vLLM server", OPENAI: "an OpenAI-compatible server (not llama-server or Ollama)"}.get(
        backend, "not a server kvmon knows"
    )
    raise SourceError(
        SourceFailure(
            FailureKind.UNEXPECTED_BODY,
            f"{shown} is {what}; kvmon reads llama-server and Ollama",
        )
    )
