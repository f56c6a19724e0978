"""Speculative decoding's draft model as llama-server loads it (``-md``): its weights and its shape, from its GGUF
header, read once per version of the file like the model's own.

llama-server gives the draft a context of its own beside the model's (the same cells and sequences, its own cache
types ``-ctkd``/``-ctvd``): with the shape, the analysis sizes that KV cache and what each drafted token reads. A
draft file kvmon cannot read leaves ``reasons["model.draft"]`` saying so, and the speculative ceiling an upper bound.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

from kvmon.core.readings import ModelInfo, ServerConfig
from kvmon.sources.model_file import ModelFiles


def with_draft(model: ModelInfo, config: ServerConfig, files: ModelFiles, resolve: Callable[[str], str | None],
               local_files: bool, reasons: dict[str, str]) -> ModelInfo:
    """``model`` with the draft model's weights, shape and file name (``config.draft_model_path``), as far as its
    file can be read here; ``resolve`` turns the path the server was given into one on this machine."""
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
    header, why, key = files.header(full)
    if header is None or header.tensor_bytes is None:
        why = why or f"draft model {name!r} has no tensor sizes"
        reasons["model.draft"] = f"{why}: its reads and its KV cache are not known"
        return model
    shape, swhy = files.shape(header.metadata, key)
    if swhy:
        reasons["model.draft"] = f"draft model {name!r}: {swhy}; its KV cache is not known"
    return dataclasses.replace(model, draft_weight_bytes=header.tensor_bytes, draft_shape=shape)
