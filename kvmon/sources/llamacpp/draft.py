"""Speculative decoding's draft model as llama-server loads it (``-md``): its weights and its shape, from its GGUF
header, read once per version of the file like the model's own.

llama-server gives the draft a context of its own beside the model's (the same cells and sequences, its own cache
types ``-ctkd``/``-ctvd``): with the shape, the analysis sizes that KV cache and what each drafted token reads. A
draft file kvmon cannot read leaves ``reasons["model.draft"]`` saying so, and the speculative ceiling an upper bound.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Hashable

from gguf import Keys

from kvmon.core.jsonvals import json_int, json_str
from kvmon.core.readings import ModelInfo, ServerConfig
from kvmon.physics.mtp import mtp_bytes_read
from kvmon.sources.gguf_meta import GgufHeader
from kvmon.sources.model_file import ModelFiles


def mtp_weight_bytes(header: GgufHeader) -> int | None:
    """What one token drafted by the model's own multi-token-prediction layers reads (``<arch>.nextn_predict_layers``
    > 0, the drafter of ``--spec-type draft-mtp``), from its tensor list; None for a model without them."""
    meta = header.metadata
    arch = json_str(meta.get(Keys.General.ARCHITECTURE))
    if not arch:
        return None
    llm = Keys.LLM  # the keys as gguf-py (llama.cpp's own package) spells them: "{arch}.nextn_predict_layers", …
    nextn = json_int(meta.get(llm.NEXTN_PREDICT_LAYERS.format(arch=arch)))
    blocks = json_int(meta.get(llm.BLOCK_COUNT.format(arch=arch)))
    if not nextn or not blocks:
        return None
    read = mtp_bytes_read(header.tensor_sizes, blocks, nextn, json_int(meta.get(llm.EXPERT_COUNT.format(arch=arch)))
                          or 0, json_int(meta.get(llm.EXPERT_USED_COUNT.format(arch=arch))) or 0)
    return read.bytes if read is not None else None


def with_draft(model: ModelInfo, config: ServerConfig, files: ModelFiles, resolve: Callable[[str], str | None],
               local_files: bool, reasons: dict[str, str], *, start: Hashable | None = None) -> ModelInfo:
    """``model`` with the draft model's weights, shape and file name (``config.draft_model_path``), as far as its
    file can be read here; ``resolve`` turns the path the server was given into one on this machine; ``start``:
    which start of the server this is (its files are read once per start)."""
    path = config.draft_model_path
    if not path:
        return model
    name = os.path.basename(path)
    model = dataclasses.replace(model, draft_name=name)
    full = resolve(path) if local_files else None
    if full is None:
        where = "its folder is unknown" if local_files else "it is on the server's machine"
        reasons["model.draft"] = f"draft model {name!r} is not read ({where}): its reads and its KV cache are not known"
        return model
    header, why, key = files.header(full, start)
    if header is None or header.tensor_bytes is None:
        why = why or f"draft model {name!r} has no tensor sizes"
        reasons["model.draft"] = f"{why}: its reads and its KV cache are not known"
        return model
    shape, swhy = files.shape(header.metadata, key)
    if swhy:
        reasons["model.draft"] = f"draft model {name!r}: {swhy}; its KV cache is not known"
    return dataclasses.replace(model, draft_weight_bytes=header.tensor_bytes, draft_shape=shape)
