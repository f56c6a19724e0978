"""vLLM's /metrics and /v1/models pages read: v1 and v0 names, data-parallel engines, bad lines and impossible values,
the cache config, adapters."""

from __future__ import annotations

import json

import pytest
from repo_paths import FIXTURES

from kvmon.sources.vllm.parse import parse_metrics, parse_models

FIXTURES = FIXTURES / "vllm"


MODEL = "Qwen/Qwen3-8B"


def _text(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_v1_page() -> None:
    page = parse_metrics(_text("metrics.v1.txt"))
    m = page.models[MODEL]
    assert page.has_vllm and not page.notes
    assert (m.kv_usage_fraction, m.kv_usage_name) == (0.25, "vllm:kv_cache_usage_perc")
    assert (m.requests_running, m.requests_waiting) == (1.0, 2.0)
    assert (m.prompt_tokens_total, m.generation_tokens_total) == (184320.0, 52011.0)
    assert m.itl is not None and m.itl.name == "inter_token_latency_seconds" and m.itl.count == 51911.0
    assert m.ttft is not None and m.ttft.sum_s / m.ttft.count == pytest.approx(0.125)
    assert m.prefill_time is not None and m.prefill_time.sum_s == pytest.approx(7.36)
    c = page.cache
    assert (c.num_gpu_blocks, c.block_size, c.cache_dtype, c.kv_cache_size_tokens) == (27428, 16, "auto", 438848)
    assert c.capacity_tokens == 438848  # vLLM's own count wins over blocks × block size


def test_v0_names_without_engine_label() -> None:
    m = parse_metrics(_text("metrics.v0.txt")).models[MODEL]
    assert (m.kv_usage_fraction, m.kv_usage_name) == (0.25, "vllm:gpu_cache_usage_perc")
    assert m.itl is not None and m.itl.name == "time_per_output_token_seconds"
    assert m.prefix_cache_hits_total == 96256.0
    assert m.engines == 1


def test_data_parallel_engines_add_up() -> None:
    page = parse_metrics(_text("metrics.dp2.txt"))
    m = page.models[MODEL]
    assert m.engines == 2
    assert m.generation_tokens_total == 2 * 52011.0 and m.requests_running == 2.0
    assert m.kv_usage_fraction == pytest.approx(0.5)  # the mean of 0.25 and 0.75: equal pools
    assert page.cache.num_gpu_blocks == 2 * 27428 and page.cache.capacity_tokens == 2 * 438848


def test_one_bad_line_loses_only_itself() -> None:
    text = _text("metrics.v1.txt").replace(
        'vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3-8B"} 2.0',
        'vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3-8B" 2.0 garbage')
    page = parse_metrics(text)
    m = page.models[MODEL]
    assert m.requests_waiting is None and m.generation_tokens_total == 52011.0
    assert any("not readable as Prometheus samples" in n for n in page.notes)


def test_a_model_name_with_a_line_separator_character_is_one_line_of_the_page() -> None:
    """Prometheus text ends a line at "\n" alone: a label value holding U+2028 or U+0085 (a model's name) is not cut
    in two when a bad line elsewhere makes kvmon read the page line by line."""
    odd = "Qwen/Qwen3-8B\u2028\x85x"
    text = _text("metrics.v1.txt").replace("Qwen/Qwen3-8B", odd).replace(
        f'vllm:num_requests_waiting{{engine="0",model_name="{odd}"}} 2.0',
        f'vllm:num_requests_waiting{{engine="0",model_name="{odd}" 2.0 garbage')
    page = parse_metrics(text)
    [(name, m)] = page.models.items()  # one model, its name as plain text (kvmon.core.redact)
    assert name.startswith("Qwen/Qwen3-8B") and m.generation_tokens_total == 52011.0
    assert [n.split(" (")[0] for n in page.notes] == ["1 /metrics line(s) not readable as Prometheus samples"]


@pytest.mark.parametrize("value", ["NaN", "-3", "+Inf"])
def test_impossible_values_are_unknown(value: str) -> None:
    text = _text("metrics.v1.txt").replace(
        'vllm:generation_tokens_total{engine="0",model_name="Qwen/Qwen3-8B"} 52011.0',
        f'vllm:generation_tokens_total{{engine="0",model_name="Qwen/Qwen3-8B"}} {value}')
    page = parse_metrics(text)
    assert page.models[MODEL].generation_tokens_total is None
    assert any("generation_tokens_total" in n for n in page.notes)


def test_cache_config_before_the_engine_is_sized() -> None:
    text = 'vllm:cache_config_info{block_size="16",cache_dtype="fp8",engine="0",num_gpu_blocks="None"} 1.0\n'
    c = parse_metrics(text).cache
    assert c.num_gpu_blocks is None and c.capacity_tokens is None and c.cache_dtype == "fp8"


def test_cache_config_disagreeing_engines_is_not_read() -> None:
    text = ('vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="10"} 1.0\n'
            'vllm:cache_config_info{block_size="32",engine="1",num_gpu_blocks="10"} 1.0\n')
    page = parse_metrics(text)
    assert page.cache.capacity_tokens is None and any("differs between engines" in n for n in page.notes)


def test_not_a_vllm_page() -> None:
    page = parse_metrics("# HELP x y\nx 1\n")
    assert not page.has_vllm and not page.models


def test_models_skip_adapters() -> None:
    cards, notes = parse_models(json.loads(_text("v1-models.json")))
    assert [(c.id, c.root, c.max_model_len) for c in cards] == [(MODEL, "/models/Qwen3-8B", 40960)]
    assert not notes
    assert parse_models({"data": "x"}) == ([], ["/v1/models has no data list"])
    assert parse_models({"data": [{"id": 5}, "x"]})[1] == ["/v1/models has an entry without an id"] * 2
