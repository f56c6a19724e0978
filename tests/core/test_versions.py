"""Server versions that change what kvmon may read: parsed, and Ollama's cached-prompt rule decided from them."""

from __future__ import annotations


def test_version_and_cached_prompt_rule() -> None:
    from kvmon.core.versions import ollama_counts_cached_prompt, parse_version

    assert parse_version("0.33.0-rc2") == (0, 33, 0)
    assert parse_version("v0.9.6") == (0, 9, 6)
    assert parse_version("dev") is None
    assert ollama_counts_cached_prompt("0.30.0") is True
    assert ollama_counts_cached_prompt("0.29.9") is False
    assert ollama_counts_cached_prompt(None) is None
