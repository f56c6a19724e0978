"""llama-server in router mode (started without a model: one child server per loaded model).

The backend object below is what the rest of kvmon asks for this server's words and limits."""

from kvmon.core.backend import Backend

ROUTER = Backend("llama-router", label="llama-server router", source="kvmon.sources.router.source:LlamaRouterSource",
                 summary="kvmon.sources.router.source:server_summary")
