"""Ollama: its source, the parsers of its answers and its child llama-server.

The backend object below is what the rest of kvmon asks for this server's words and limits."""

from kvmon.core.backend import Backend

OLLAMA = Backend(
    "ollama", label="Ollama", source="kvmon.sources.ollama.source:OllamaSource", ports=(11434,),
    sweep="kvmon.sources.ollama.sweep:OllamaSweep", summary="kvmon.sources.ollama.parse:server_summary",
    context_setting="num_ctx", offload_setting="num_gpu",
    # Ollama's own cache types; a quantised cache needs its flash attention switch
    cache_type_setting="OLLAMA_KV_CACHE_TYPE={type_k} OLLAMA_FLASH_ATTENTION=1", cache_types=("q8_0", "q4_0"),
    prompt_cache_setting="LLAMA_ARG_CACHE_RAM={mib} in Ollama's environment",
    hidden_cache_type_why="kvmon cannot see OLLAMA_KV_CACHE_TYPE", depth_hint=" (run `kvmon proxy` to see it)",
    reads_log=True)
