"""LM Studio: its source and the parsers of its REST API.

The backend object below is what the rest of kvmon asks for this server's words and limits."""

from kvmon.core.backend import Backend

LMSTUDIO = Backend(
    "lmstudio", label="LM Studio", sweep="kvmon.sources.lmstudio.sweep:LmStudioSweep",
    source="kvmon.sources.lmstudio.source:LmStudioSource", summary="kvmon.sources.lmstudio.parse:server_summary",
    ports=(1234,),  # every LM Studio example and `lms server status`
    context_setting="the context length in the model's load settings",
    offload_setting="GPU offload in the model's load settings",
    kv_in_host_fix=('turn on "Offload KV cache to GPU memory" in the model\'s load settings, or free VRAM and lower '
                    "its context length"),
    hidden_cache_type_why="kvmon cannot see LM Studio's cache settings", depth_hint=" (run `kvmon proxy` to see it)")
