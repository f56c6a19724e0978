"""vLLM: its source and the parsers of its Prometheus page and model list.

The backend object below is what the rest of kvmon asks for this server's words and limits."""

from kvmon.core.backend import Backend

VLLM = Backend(
    "vllm", label="vLLM", sweep="kvmon.sources.vllm.sweep:VllmSweep",
    source="kvmon.sources.vllm.source:VllmSource", summary="kvmon.sources.vllm.parse:server_summary",
    ports=(8000,),  # vllm/entrypoints/common/cli_args.py: --port 8000
    context_setting="--max-model-len", offload_setting="--cpu-offload-gb",
    cache_type_setting="--kv-cache-dtype {type_k}", cache_types=("fp8",),
    hidden_cache_type_why="kvmon cannot see vLLM's --kv-cache-dtype", kv_pool_fills_memory=True,
    generated_tokens_counter="generation_tokens_total",
    # the prefix cache counts the prompt tokens it looked up and those it found, in tokens
    prompt_counters=("prefix_cache_queries_total", "prefix_cache_hits_total", "request_prefill_time_seconds_sum",
                     True))
