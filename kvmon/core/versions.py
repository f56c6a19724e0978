"""Server versions that change what kvmon may read from a server, decided once for every part that reads it.

Ollama 0.30 began to run llama-server as a child process (whose ``/slots`` give a live rate) and to count the
prompt tokens served from its cache in ``prompt_eval_count`` while ``prompt_eval_duration`` covers only those it
computed: on such an Ollama, count ÷ duration overstates prefill speed. The Ollama source and ``kvmon proxy``
both ask ``ollama_counts_cached_prompt``.
"""

from __future__ import annotations

import re

OLLAMA_CHILD_VERSION = (0, 30)


def parse_version(text: str | None) -> tuple[int, ...] | None:
    """``"0.33.0-rc2"`` → ``(0, 33, 0)``; None when there are no leading numbers."""
    if not isinstance(text, str):
        return None
    m = re.match(r"\s*v?(\d+(?:\.\d+)*)", text)
    if not m:
        return None
    return tuple(int(p) for p in m.group(1).split("."))


def ollama_counts_cached_prompt(version: str | tuple[int, ...] | None) -> bool | None:
    """Whether this Ollama counts cached prompt tokens in ``prompt_eval_count`` (>= 0.30); None if unknown."""
    v = parse_version(version) if isinstance(version, str) or version is None else version
    if v is None:
        return None
    return v[:2] >= OLLAMA_CHILD_VERSION
