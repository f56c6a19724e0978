"""llama.cpp's llama-server: its source, the parsers of its answers, its command line, log and process.

The backend object below is what the rest of kvmon asks for this server's words and limits."""

from kvmon.core.backend import Backend

LLAMA_SERVER = Backend(
    "llama-server", label="llama-server", source="kvmon.sources.llamacpp.source:LlamaServerSource",
    sweep="kvmon.sources.llamacpp.sweep:LlamaServerSweep", summary="kvmon.sources.llamacpp.parse:server_summary",
    ports=(9931, 8080),  # common/common.h `port = 9931` (b11549); 8080 before
    context_setting="-c", offload_setting="-ngl", cache_type_setting="-ctk {type_k} -ctv {type_v}",
    flash_attention_setting=" -fa on", prompt_cache_setting="--cache-ram {mib}", metrics_setting="--metrics",
    hidden_cache_type_why="kvmon cannot see the server's -ctk/-ctv: give it the server's log with --log",
    depth_hint=" (enable /slots)", reads_log=True,
    prompt_counters=("prompt_tokens_total", "prompt_tokens_cached_total", "prompt_seconds_total", False))
