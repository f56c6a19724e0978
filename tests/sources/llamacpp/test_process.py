"""Telling a llama-server process from others by its command line, whatever its name."""

from __future__ import annotations

from kvmon.sources.llamacpp.process import looks_like_llama_server


def test_looks_like_llama_server() -> None:
    assert looks_like_llama_server(["/usr/bin/llama-server", "-m", "x"], None)
    assert looks_like_llama_server(["python3", "fake.py", "--model", "x.gguf"], None)
    assert not looks_like_llama_server(["python3", "-m", "http.server"], {})
    assert looks_like_llama_server(["python3", "x.py"], {"LLAMA_ARG_MODEL": "/m.gguf"})
    assert not looks_like_llama_server(["nginx"], {})
    assert not looks_like_llama_server([], {})
