"""Every backend kvmon reads, from their own packages, and the lookup by name (a detection's answer, a recording)."""

from __future__ import annotations

from kvmon.core.backend import GENERIC, Backend
from kvmon.sources.llama_swap import LLAMA_SWAP
from kvmon.sources.llamacpp import LLAMA_SERVER
from kvmon.sources.lmstudio import LMSTUDIO
from kvmon.sources.ollama import OLLAMA
from kvmon.sources.router import ROUTER
from kvmon.sources.vllm import VLLM

__all__ = ["ALL", "LLAMA_SERVER", "LLAMA_SWAP", "LMSTUDIO", "OLLAMA", "OPENAI", "ROUTER", "VLLM", "by_name"]

OPENAI = Backend("openai", label="an OpenAI-compatible server")
ALL: tuple[Backend, ...] = (LLAMA_SERVER, ROUTER, LLAMA_SWAP, OLLAMA, VLLM, LMSTUDIO, OPENAI)
_BY_NAME = {b.name: b for b in ALL}


def by_name(name: str | None) -> Backend:
    """The backend called ``name``; the generic words under that name for one kvmon does not know."""
    if not name:
        return GENERIC
    return _BY_NAME.get(name) or Backend(name)
