"""Server settings in layers: what the server's defaults, its process, its log and the user say, merged field by
field (later layers win, only with the fields they set) with the provenance of the layer that won.

Both server sources build their ``ServerConfig`` here: llama-server's defaults < its command line < its log <
the user; Ollama's defaults < its log < what ``/api/ps`` measured < its llama-server child's command line < the
user.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from kvmon.core.readings import Provenance, ServerConfig

CONFIG_FIELDS = tuple(f.name for f in dataclasses.fields(ServerConfig) if f.name != "provenance")


def _set(value: Any) -> bool:
    """Whether a layer sets this field: an empty mapping or sequence (no buffers, no devices) sets nothing."""
    return value is not None and not (isinstance(value, (Mapping, tuple, list)) and not value)


def merge_configs(*layers: ServerConfig | None) -> ServerConfig:
    """Later layers win field by field (only fields they actually set); provenance follows the winner."""
    values: dict[str, Any] = {}
    prov: dict[str, Provenance] = {}
    for layer in layers:
        if layer is None:
            continue
        for name in CONFIG_FIELDS:
            v = getattr(layer, name)
            if not _set(v):
                continue
            values[name] = v
            prov[name] = layer.provenance.get(name, Provenance.USER)
    return ServerConfig(**values, provenance=prov)


def user_config(config: ServerConfig | None) -> ServerConfig | None:
    """The user's settings as a layer: every field it sets is ``user`` unless it says otherwise."""
    if config is None or config.provenance:
        return config
    return dataclasses.replace(config, provenance={n: Provenance.USER for n in CONFIG_FIELDS
                                                   if _set(getattr(config, n))})
