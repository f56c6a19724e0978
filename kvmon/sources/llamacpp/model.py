"""llama-server's model as /props, /v1/models and the model file say: name, architecture, sizes, shape.

The /v1/models entry is read once per model (it changes on a reload), the model file once per start of the server
(``kvmon.sources.model_file``: a file written anew while the server runs is not what it serves). A remote
server's paths are never opened here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from kvmon.core.jsonvals import json_int, json_str, json_text
from kvmon.core.readings import ModelInfo
from kvmon.core.sanitize import plain_text
from kvmon.sources.gguf_meta import GgufHeader
from kvmon.sources.llamacpp.draft import mtp_weight_bytes
from kvmon.sources.llamacpp.process import LlamaServerProcess
from kvmon.sources.model_file import ModelFiles, display_name


class ModelDescriber:
    """One server's loaded model. ``get_json(path, reasons, key)``: the source's GET that turns a failure into a
    reason; ``model_override``: GGUF-keyed metadata the user set; ``model_name``: the name the user gave the model
    elsewhere (a router's or llama-swap's)."""

    def __init__(self, get_json: Callable[[str, dict[str, str], str], Any], process: LlamaServerProcess, *,
                 local_files: bool, model_override: Mapping[str, Any] | None = None,
                 model_name: str | None = None) -> None:
        self._get_json = get_json
        self._process = process
        self.local_files = local_files  # the server's paths are files on this machine
        self._model_override = dict(model_override) if model_override else None
        self._model_name = model_name
        self._v1_cache: tuple[tuple[Any, ...], Mapping[str, Any] | None, str | None] | None = None
        self.files = ModelFiles()  # the GGUF header and shape of the model file, once per version of it

    def _v1_models(
        self, key: tuple[Any, ...], model_id: str | None = None
    ) -> tuple[Mapping[str, Any] | None, str | None]:
        """The /v1/models entry (``model_id``'s, else ``data[0]``), cached per model since it changes on reload."""
        if self._v1_cache is not None and self._v1_cache[0] == key and self._v1_cache[1] is not None:
            return self._v1_cache[1], self._v1_cache[2]
        reasons: dict[str, str] = {}
        body = self._get_json("/v1/models", reasons, "v1_models")
        entry: Mapping[str, Any] | None = None
        why = reasons.get("v1_models")
        if body is not None:
            data = body.get("data") if isinstance(body, Mapping) else None
            chosen = [e for e in data if isinstance(e, Mapping) and e.get("id") == model_id] if (
                isinstance(data, list) and model_id) else []
            if chosen:
                entry = chosen[0]
            elif isinstance(data, list) and data and isinstance(data[0], Mapping):
                entry = data[0]
            else:
                why = "/v1/models has no data[0] entry"
        self._v1_cache = (key, entry, why)
        return entry, why

    def resolve(self, model_path: str | None) -> str | None:
        """The path the server was given as a path on this machine (a relative one against its folder), or None."""
        if not model_path:
            return None
        if os.path.isabs(model_path):
            return model_path
        cwd = self._process.cwd()
        return os.path.join(cwd, model_path) if cwd else None

    def info(self, props: Mapping[str, Any], model_id: str | None,
             start: Hashable | None) -> tuple[ModelInfo, dict[str, str]]:
        """The loaded model as /props, /v1/models and the model file's header say (the file is read once per
        ``start`` of the server)."""
        raw_path = json_text(props.get("model_path"))  # opened as given; shown as plain text
        model_path = plain_text(raw_path) if raw_path else None
        entry, why = self._v1_models((raw_path, props.get("build_info"), model_id), model_id)
        full_path = self.resolve(raw_path) if self.local_files else None
        header: GgufHeader | None = None
        gwhy = None
        file_key: tuple[str, int, int] | None = None
        if full_path is not None:
            header, gwhy, file_key = self.files.header(full_path, start)
        reasons: dict[str, str] = {}
        if why:
            reasons["v1_models"] = why
        meta = entry.get("meta") if entry is not None else None
        meta = meta if isinstance(meta, Mapping) else {}
        server_name = json_str(props.get("model_alias")) or (json_str(entry.get("id")) if entry else None)
        quant = json_str(props.get("model_ftype")) or json_str(meta.get("ftype"))
        n_params = json_int(meta.get("n_params"))
        weight_bytes = json_int(meta.get("size"))
        n_ctx_train = json_int(meta.get("n_ctx_train"))
        n_embd = json_int(meta.get("n_embd"))

        shape = None
        shape_source = None
        mtp_bytes: int | None = None
        arch = None
        metadata: dict[str, Any] | None = None
        if model_path and not self.local_files:
            reasons["model.shape"] = (f"model file {os.path.basename(model_path)!r} is on another machine (the "
                                      "server's): kvmon reads model files only of servers on this one")
        elif full_path is not None:
            if header is not None:
                metadata = dict(header.metadata)
                shape_source = "gguf"
                mtp_bytes = mtp_weight_bytes(header)  # the model's own MTP layers (the draft-mtp drafter)
                if weight_bytes is None and header.tensor_bytes is not None:
                    weight_bytes = header.tensor_bytes
            elif gwhy:
                reasons["model.shape"] = gwhy
        elif model_path:
            reasons["model.shape"] = (
                f"model file {os.path.basename(model_path)!r} is not on this machine (or its folder is unknown)"
            )
        else:
            reasons["model.shape"] = "the server does not say which model file it loaded"
        if self._model_override:
            metadata = {**(metadata or {}), **self._model_override}
            shape_source = "user"
        if metadata is not None:
            arch = json_str(metadata.get("general.architecture"))
            # the same file header (path, size, mtime) gives the same shape (the overrides are fixed): built once
            shape, swhy = self.files.shape(metadata, file_key)
            if swhy:
                reasons["model.shape"] = swhy
                shape_source = None
            else:
                reasons.pop("model.shape", None)
            if arch and n_ctx_train is None:
                n_ctx_train = json_int(metadata.get(f"{arch}.context_length"))
            if arch and n_embd is None:
                n_embd = json_int(metadata.get(f"{arch}.embedding_length"))
        general_name = json_str(metadata.get("general.name")) if metadata is not None else None
        return (
            ModelInfo(
                # a router's or llama-swap's name for the model is the one the user gave it (and asks for it by)
                name=display_name(self._model_name or model_id or server_name, model_path, general_name),
                server_name=server_name,
                arch=arch,
                n_params=n_params,
                weight_bytes=weight_bytes,
                n_ctx_train=n_ctx_train,
                n_embd=n_embd,
                quantization=quant,
                path=model_path,
                shape=shape,
                shape_source=shape_source,
                mtp_weight_bytes=mtp_bytes,
            ),
            reasons,
        )
