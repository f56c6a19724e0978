"""llama-swap: a proxy that starts and stops llama-server children from its config.

The backend object below is what the rest of kvmon asks for this server's words and limits."""

from kvmon.core.backend import Backend

LLAMA_SWAP = Backend("llama-swap", label="llama-swap", source="kvmon.sources.llama_swap.source:LlamaSwapSource",
                     summary="kvmon.sources.llama_swap.source:server_summary",
                     ports=(8080,))  # llama-swap.go: default -listen ":8080"
