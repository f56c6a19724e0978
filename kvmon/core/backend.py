"""A kind of model server as one object: its name (what JSON, Prometheus, CSV and recordings carry), how it names
each setting a fix changes, what it can and cannot tell kvmon, and where it listens by default.

A ``Backend`` is a ``str`` (its name), so a reading's ``backend`` prints, compares and serialises as before; the
rules that advise a user ask it for their words instead of branching on the name. The instances live with their
parsers in ``kvmon.sources.<backend>``; ``GENERIC`` stands in where the server is not known (a recording's plain
name, an OpenAI-compatible server).
"""

from __future__ import annotations

from typing import Any

_WORDS: dict[str, Any] = {
    # what users call it on screen
    "label": None,
    # "module:callable" (url, **options) -> source; None: detected but not read
    "source": None,
    # "module:callable" (url, api_key=, model_id=) -> how a depth sweep drives it; None: kvmon cannot sweep it
    "sweep": None,
    # "module:callable" (json: a path's JSON body, None when it answered none) -> (version, a few words on what it
    # serves), for a list of servers; None: it says neither
    "summary": None,
    # where it listens when its command line does not say, in the order to try
    "ports": (),
    # how its context size is set ("-c", "num_ctx", "--max-model-len", ...)
    "context_setting": "context size",
    # how more of the model goes onto the GPU; None: this server has no such setting
    "offload_setting": None,
    # how the KV cache type is set, with ``{type}`` for the type; None: not a setting kvmon can advise
    "cache_type_setting": None,
    # the cache types it offers (None: every llama.cpp type); advice names only these
    "cache_types": None,
    # added to the cache-type flags when a quantised V cache needs flash attention ("" when the flag says it)
    "flash_attention_setting": "",
    # what a user does when the KV cache sits in host RAM (None: free VRAM / smaller context / cache type)
    "kv_in_host_fix": None,
    # its host-RAM prompt cache's limit, with ``{mib}``; None: it keeps none kvmon knows of
    "prompt_cache_setting": None,
    # the switch that turns on its metrics page when kvmon sees it is off; None: always on or not read
    "metrics_setting": None,
    # why kvmon cannot see its cache type, when it cannot
    "hidden_cache_type_why": "kvmon cannot see the server's cache type",
    # what shows the context depth when the server does not report it
    "depth_hint": "",
    # it writes a llama.cpp log kvmon reads (``--log``): where each buffer went, the cache sizes
    "reads_log": False,
    # its KV pool fills the memory it is given: a cheaper cache type holds more tokens and frees nothing
    "kv_pool_fills_memory": False,
    # the counter of generated tokens beside the speculation counts (speculative decoding's tokens per step)
    "generated_tokens_counter": "tokens_predicted_total",
    # its prompt counters: (prompt tokens read, tokens reused from the cache, seconds reading prompts, whether the
    # first counts the reused ones too); None: it has none kvmon reads
    "prompt_counters": None,
}


class Backend(str):
    """A server kind: its name, and its words and limits (``_WORDS`` lists each with its default)."""

    label: str  # the name when none is given
    source: str | None
    sweep: str | None
    summary: str | None
    ports: tuple[int, ...]
    context_setting: str
    offload_setting: str | None
    cache_type_setting: str | None
    cache_types: tuple[str, ...] | None
    flash_attention_setting: str
    kv_in_host_fix: str | None
    prompt_cache_setting: str | None
    metrics_setting: str | None
    hidden_cache_type_why: str
    depth_hint: str
    kv_pool_fills_memory: bool
    reads_log: bool
    prompt_counters: tuple[str, str, str | None, bool] | None
    generated_tokens_counter: str

    def __new__(cls, name: str, **words: Any) -> Backend:
        unknown = set(words) - set(_WORDS)
        if unknown:
            raise TypeError(f"unknown backend words: {', '.join(sorted(unknown))}")
        self = super().__new__(cls, name)
        for key, default in _WORDS.items():
            object.__setattr__(self, key, words.get(key, default))
        if self.label is None:
            object.__setattr__(self, "label", name)
        return self

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("a Backend is read-only")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (str(self), {k: getattr(self, k) for k in _WORDS}))

    @property
    def name(self) -> str:
        """The plain name ("ollama"): what documents and labels carry."""
        return str(self)

    def cache_type_flags(self, type_k: str, type_v: str | None = None, *, needs_flash_attention: bool = False
                         ) -> str | None:
        """The settings that give the cache ``type_k``/``type_v`` on this server, or None when it has none."""
        if self.cache_type_setting is None:
            return None
        v = type_v or type_k
        flags = self.cache_type_setting.format(type=type_k, type_k=type_k, type_v=v)
        return flags + (self.flash_attention_setting if needs_flash_attention else "")

    def offers_cache_type(self, type_name: str) -> bool:
        """Whether a cache type is one this server can be set to (advice names no other)."""
        return self.cache_type_setting is not None and (self.cache_types is None or type_name in self.cache_types)


def _rebuild(name: str, words: dict[str, Any]) -> Backend:
    return Backend(name, **words)


GENERIC = Backend("unknown", label="a model server")


def backend_of(value: Any) -> Backend:
    """The Backend a reading or a recording names: itself when it is one, else the generic words under its name."""
    if isinstance(value, Backend):
        return value
    if isinstance(value, str) and value:
        return Backend(value)
    return GENERIC
