"""A kind of server as one object: the settings each one's advice names (flags, environment), the cache types it
offers, and its words kept whole wherever it goes."""

from __future__ import annotations

import pickle

import pytest

from kvmon.core.backend import GENERIC, backend_of
from kvmon.sources.backends import by_name


def test_llama_server_advice_names_both_cache_flags_and_flash_attention_when_needed() -> None:
    llama = by_name("llama-server")
    assert llama.cache_type_flags("q8_0", "f16", needs_flash_attention=True) == "-ctk q8_0 -ctv f16 -fa on"
    assert llama.cache_type_flags("q4_0") == "-ctk q4_0 -ctv q4_0"
    assert llama.offers_cache_type("iq4_nl")


def test_ollama_advice_is_its_environment_and_only_the_types_it_offers() -> None:
    ollama = by_name("ollama")
    assert ollama.cache_type_flags("q8_0") == "OLLAMA_KV_CACHE_TYPE=q8_0 OLLAMA_FLASH_ATTENTION=1"
    assert ollama.offers_cache_type("q4_0")
    assert not ollama.offers_cache_type("q5_1")


def test_a_server_without_a_cache_setting_gets_no_cache_advice() -> None:
    router = by_name("llama-router")
    assert router.cache_type_flags("q8_0") is None
    assert not router.offers_cache_type("q8_0")
    assert not by_name("vllm").offers_cache_type("q8_0")
    assert by_name("vllm").offers_cache_type("fp8")


def test_a_backend_keeps_its_words_across_processes_and_cannot_be_changed() -> None:
    llama = by_name("llama-server")
    copy = pickle.loads(pickle.dumps(llama))
    assert copy == llama and copy.label == llama.label and copy.cache_type_setting == llama.cache_type_setting
    with pytest.raises(AttributeError, match="read-only"):
        llama.label = "something else"  # type: ignore[misc]


def test_what_a_recording_names_becomes_a_backend() -> None:
    assert backend_of(None) is GENERIC
    assert backend_of(by_name("ollama")) is by_name("ollama")
    assert backend_of("sglang").label == "sglang"
