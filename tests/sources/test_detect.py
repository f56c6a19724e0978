"""Backend detection over real HTTP: llama-server (whose /v1/models looks Ollama-ish), Ollama, vLLM, others."""

from __future__ import annotations

import json
import socket

import pytest
from helpers_http import FixtureServer, serve_llama_state

from kvmon.core.readings import FailureKind, SourceError
from kvmon.sources.detect import detect_backend, open_source
from kvmon.sources.llamacpp.source import LlamaServerSource
from kvmon.sources.vllm.source import VllmSource

KEY = "test-key-123"


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_llama_server(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "idle")
    assert detect_backend(fixture_server.url, None, 1.0) == "llama-server"
    src = open_source(fixture_server.url, timeout_s=1.0)
    assert isinstance(src, LlamaServerSource)
    src.close()


def test_llama_server_loading(fixture_server: FixtureServer) -> None:
    for path in ("/health", "/props", "/v1/models"):
        fixture_server.set_capture(path, "health.loading.json")
    assert detect_backend(fixture_server.url, None, 1.0) == "llama-server"


def test_llama_server_models_list_is_not_ollama(fixture_server: FixtureServer) -> None:
    # only /v1/models answers (a proxy in front): its "models" list must not make it Ollama
    fixture_server.set_capture("/v1/models", "v1-models.idle.json")
    assert detect_backend(fixture_server.url, None, 1.0) == "llama-server"


def test_llama_server_with_key(fixture_server: FixtureServer) -> None:
    fixture_server.set_capture("/props", "api-key/props.apikey.no-key.json")
    assert detect_backend(fixture_server.url, None, 1.0) == "llama-server"  # Server: llama.cpp header


def test_ollama(fixture_server: FixtureServer) -> None:
    fixture_server.set("/api/version", 200, '{"version":"0.33.0"}')
    fixture_server.set("/v1/models", 200, '{"object":"list","data":[{"id":"llama3.2","owned_by":"library"}]}')
    assert detect_backend(fixture_server.url, None, 1.0) == "ollama"


def test_vllm(fixture_server: FixtureServer) -> None:
    fixture_server.set("/version", 200, '{"version":"0.11.0"}')
    assert detect_backend(fixture_server.url, None, 1.0) == "vllm"


def test_vllm_by_metrics(fixture_server: FixtureServer) -> None:
    fixture_server.set("/metrics", 200, "# HELP vllm:num_requests_running x\nvllm:num_requests_running 0\n",
                       {"Content-Type": "text/plain"})
    assert detect_backend(fixture_server.url, None, 1.0) == "vllm"
    src = open_source(fixture_server.url, timeout_s=1.0)
    assert isinstance(src, VllmSource)
    src.close()


def test_other_openai_compatible(fixture_server: FixtureServer) -> None:
    fixture_server.set("/v1/models", 200, '{"object":"list","data":[{"id":"m","owned_by":"someone"}]}')
    assert detect_backend(fixture_server.url, None, 1.0) == "openai"


def test_unknown(fixture_server: FixtureServer) -> None:
    fixture_server.set("/", 200, "<html>hello</html>")
    assert detect_backend(fixture_server.url, None, 1.0) == "unknown"
    with pytest.raises(SourceError):
        open_source(fixture_server.url, timeout_s=1.0)


def test_auth_everywhere(fixture_server: FixtureServer) -> None:
    body = '{"error":{"message":"nope","type":"authentication_error","code":401}}'
    for p in ("/props", "/api/version", "/version", "/metrics", "/v1/models"):
        fixture_server.set(p, 401, body)
    with pytest.raises(SourceError) as e:
        detect_backend(fixture_server.url, "wrong", 1.0)
    assert e.value.failure.kind == FailureKind.AUTH_REJECTED


def test_unreachable_raises_but_open_source_picks_by_port() -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    with pytest.raises(SourceError) as e:
        detect_backend(url, None, 0.5)
    assert e.value.failure.kind == FailureKind.UNREACHABLE
    src = open_source(url, timeout_s=0.5)
    assert src.backend == "llama-server"
    src.close()


def test_hanging_server_times_out(fixture_server: FixtureServer) -> None:
    fixture_server.hang("/props", 3.0)
    with pytest.raises(SourceError) as e:
        detect_backend(fixture_server.url, None, 0.3)
    assert e.value.failure.kind == FailureKind.TIMEOUT


@pytest.mark.parametrize("url", ["", "gopher://x", "http://:99"])
def test_bad_url(url: str) -> None:
    with pytest.raises(SourceError) as e:
        open_source(url)
    assert e.value.failure.kind == FailureKind.BAD_URL


# ---- API key -----------------------------------------------------------------------------------

def _serve_keyed(server: FixtureServer) -> None:
    """Answer like ``--api-key test-key-123``: /health public, everything else needs the key."""
    serve_llama_state(server, "idle")


def test_bearer_header_sent_and_never_shown(fixture_server: FixtureServer) -> None:
    _serve_keyed(fixture_server)
    src = LlamaServerSource(fixture_server.url, api_key=KEY, timeout_s=1.0, inspect_local_process=False)
    r = src.poll()
    sent = [h for m, p, h in fixture_server.requests if p == "/props"]
    assert sent and sent[0].get("Authorization") == f"Bearer {KEY}"
    for text in (repr(src), repr(r), str(r), src.display_url, repr(src._http)):
        assert KEY not in text
    src.close()


def test_wrong_key_is_auth_rejected(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "idle")
    fixture_server.set_capture("/props", "api-key/props.apikey.no-key.json")
    fixture_server.set_capture("/slots", "api-key/slots.apikey.no-key.json")
    fixture_server.set_capture("/metrics", "api-key/metrics.apikey.no-key.txt")
    fixture_server.set_capture("/v1/models", "api-key/v1-models.apikey.wrong-key.json")
    fixture_server.set_capture("/health", "api-key/health.apikey.no-key.json")
    src = LlamaServerSource(fixture_server.url, api_key=KEY, timeout_s=1.0, inspect_local_process=False)
    with pytest.raises(SourceError) as e:
        src.poll()
    assert e.value.failure.kind == FailureKind.AUTH_REJECTED
    assert "API key rejected" in e.value.failure.reason
    assert KEY not in str(e.value) and KEY not in repr(e.value.failure)


def test_url_credentials_never_shown(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "idle")
    url = fixture_server.url.replace("http://", "http://user:secretpw@") + "/?token=secrettok"
    src = LlamaServerSource(url.split("/?")[0], timeout_s=1.0, inspect_local_process=False)
    r = src.poll()
    assert "secretpw" not in json.dumps(r.url) and "secretpw" not in src.display_url
    src.close()


@pytest.mark.parametrize(("scenario", "backend", "cls", "summary"), [
    ("vllm", "vllm", "VllmSource", "serving: Qwen/Qwen3-8B"),
    ("lmstudio", "lmstudio", "LmStudioSource", "loaded: google/gemma-3-12b"),
])
def test_simulated_vllm_and_lmstudio(scenario: str, backend: str, cls: str, summary: str) -> None:
    from kvmon.sim.server import SimServer
    from kvmon.sources.detect import identify

    with SimServer(scenario) as sim:
        ident = identify(sim.url, None, 2.0, summary=True)
        assert (ident.backend, ident.summary) == (backend, summary)
        assert ident.version == ("0.33.0" if backend == "vllm" else None)
        src = open_source(sim.url, timeout_s=2.0)
        try:
            assert type(src).__name__ == cls and src.poll().backend == backend
        finally:
            src.close()


def test_lmstudio_before_04_by_its_v0_list(fixture_server: FixtureServer) -> None:
    fixture_server.set("/api/v0/models", 200, '{"object":"list","data":[{"id":"m","compatibility_type":"gguf",'
                       '"state":"loaded"}]}')
    assert detect_backend(fixture_server.url, None, 1.0) == "lmstudio"


def test_ports_name_their_backend() -> None:
    from kvmon.sources.detect import backend_by_port

    assert [backend_by_port(f"http://127.0.0.1:{p}") for p in (8000, 1234, 11434, 9931)] == [
        "vllm", "lmstudio", "ollama", "llama-server"]


def test_lmstudio_with_a_token_is_picked_by_its_port() -> None:
    """LM Studio 0.4 with "Require Authentication" answers 401 everywhere: its port names it, its source says why."""
    from kvmon.sim.server import SimServer
    from kvmon.sources.lmstudio.source import LmStudioSource

    with SimServer("lmstudio", faults=["auth"]) as sim:
        with pytest.raises(SourceError) as e:
            detect_backend(sim.url, None, 2.0)
        assert e.value.failure.kind == FailureKind.AUTH_REJECTED
        src = LmStudioSource(sim.url, api_key="wrong")
        try:
            with pytest.raises(SourceError) as e2:
                src.poll()
        finally:
            src.close()
        assert e2.value.failure.kind == FailureKind.AUTH_REJECTED
