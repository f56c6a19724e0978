"""What Ollama's endpoints answer, read into plain values: ``/api/ps`` (the loaded models and their VRAM/host split),
``/api/show`` (the model's GGUF metadata, tensors and modelfile), and the names and sizes Ollama writes.

Parsing only: ``kvmon.sources.ollama.source`` asks the endpoints and builds the reading.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from kvmon.core.jsonvals import json_int, json_object, json_str
from kvmon.core.readings import FailureKind, SourceError, SourceFailure


@dataclass(frozen=True)
class OllamaModel:
    """One entry of ``/api/ps``: sizes in bytes; ``size_vram < size`` means part lives in host RAM."""

    name: str
    model: str | None
    digest: str | None
    size_bytes: int | None
    size_vram_bytes: int | None
    context_length: int | None
    expires_at: datetime | None
    family: str | None = None
    parameter_size: str | None = None
    quantization: str | None = None

    @property
    def host_bytes(self) -> int | None:
        """Bytes of this model (weights, cache and buffers) that Ollama placed in host RAM."""
        if self.size_bytes is None or self.size_vram_bytes is None:
            return None
        return max(0, self.size_bytes - self.size_vram_bytes)


def parse_parameter_size(text: Any) -> int | None:
    """Ollama's ``parameter_size`` (``"7.2B"``, ``"137M"``, ``"1.5T"``) in parameters; None if unparseable."""
    if not isinstance(text, str):
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMBT]?)\s*", text.upper())
    if not m:
        return None
    scale = {"": 1, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}[m.group(2)]
    value = float(m.group(1)) * scale
    return round(value) if value > 0 else None


def parse_time(text: Any) -> datetime | None:
    """An RFC 3339 time as Ollama writes it (nanoseconds, ``Z`` or offset); None if unparseable."""
    if not isinstance(text, str) or not text:
        return None
    s = text.strip().replace("Z", "+00:00")
    m = re.match(r"^(.*T\d\d:\d\d:\d\d)(\.\d+)?(.*)$", s)
    if m:  # Python < 3.11 accepts at most 6 fractional digits
        frac = (m.group(2) or "")[:7]
        s = m.group(1) + frac + m.group(3)
    try:
        return datetime.fromisoformat(s)
    except ValueError:
        return None


def parse_ps(body: Any) -> tuple[list[OllamaModel], list[str]]:
    """Models from an ``/api/ps`` body, plus notes on entries that could not be read.

    Raises ``SourceError(UNEXPECTED_BODY)`` when the body is not ``{"models": [...]}``.
    """
    if not isinstance(body, dict) or not isinstance(body.get("models"), list):
        raise SourceError(
            SourceFailure(FailureKind.UNEXPECTED_BODY, "/api/ps did not return {\"models\": [...]}", "/api/ps")
        )
    models: list[OllamaModel] = []
    notes: list[str] = []
    for i, entry in enumerate(body["models"]):
        if not isinstance(entry, dict):
            notes.append(f"/api/ps entry {i} is not an object")
            continue
        name = json_str(entry.get("name")) or json_str(entry.get("model"))
        if name is None:
            notes.append(f"/api/ps entry {i} has no name")
            continue
        details = json_object(entry.get("details"))
        models.append(
            OllamaModel(
                name=name,
                model=json_str(entry.get("model")),
                digest=json_str(entry.get("digest")),
                size_bytes=json_int(entry.get("size")),
                size_vram_bytes=json_int(entry.get("size_vram")),
                context_length=json_int(entry.get("context_length")) or None,
                expires_at=parse_time(entry.get("expires_at")),
                family=json_str(details.get("family")),
                parameter_size=json_str(details.get("parameter_size")),
                quantization=json_str(details.get("quantization_level")),
            )
        )
    return models, notes


def _canonical_name(name: str) -> str:
    """``llama3.1`` → ``llama3.1:latest``, as Ollama resolves a name without a tag."""
    n = name.strip()
    return n if ":" in n.rsplit("/", 1)[-1] else n + ":latest"


def names_match(name: str | None, model: OllamaModel) -> bool:
    """Whether a request's model name refers to this loaded model (a missing tag means ``latest``)."""
    if not name:
        return False
    c = _canonical_name(name)
    return any(c == _canonical_name(n) for n in (model.name, model.model) if n)


def pick_active(models: Sequence[OllamaModel], busy_names: Sequence[str] = ()) -> OllamaModel | None:
    """The model to show: one a request is streaming from now, else the one used last (latest ``expires_at``).

    Ollama pushes ``expires_at`` forward (keep-alive) on every request, so the latest is the most recent.
    """
    if not models:
        return None
    for name in busy_names:
        for m in models:
            if names_match(name, m):
                return m
    epoch = datetime.fromtimestamp(0).astimezone()

    def key(m: OllamaModel) -> datetime:
        t = m.expires_at
        if t is None:
            return epoch
        return t if t.tzinfo else t.astimezone()

    return max(models, key=key)


def weight_bytes_from_tensors(tensors: Any) -> int | None:
    """Exact weight bytes from ``/api/show``'s ``tensors`` (type names and shapes); None if any is unknown."""
    if not isinstance(tensors, list) or not tensors:
        return None
    total = 0
    for t in tensors:
        if not isinstance(t, dict) or not isinstance(t.get("type"), str) or not isinstance(t.get("shape"), list):
            return None
        try:
            qtype = GGMLQuantizationType[t["type"].upper()]
            block, type_size = GGML_QUANT_SIZES[qtype]
        except KeyError:
            return None
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in t["shape"]):
            return None
        total += math.prod(t["shape"]) // block * type_size
    return total


_BLOB_RE = re.compile(r"^FROM\s+(\S*sha256[-:][0-9a-fA-F]{64})\s*$", re.MULTILINE)


def blob_path_from_modelfile(modelfile: Any) -> str | None:
    """The model blob path in ``/api/show``'s modelfile (``FROM .../blobs/sha256-<hex>``); matches the child's
    ``--model``."""
    if not isinstance(modelfile, str):
        return None
    m = _BLOB_RE.search(modelfile)
    return m.group(1) if m else None


@dataclass(frozen=True)
class ShowInfo:
    """What one ``/api/show`` told us about a model, kept per digest."""

    arch: str | None
    n_params: int | None
    n_ctx_train: int | None
    n_embd: int | None
    weight_bytes: int | None
    blob_path: str | None
    shape: Any  # ModelShape | None
    shape_reason: str | None
    n_tensors: int = 0  # entries of the tensor list


def parse_show(body: Any, *, verbose: bool) -> ShowInfo:
    """Read an ``/api/show`` body; the shape comes from ``model_info`` (GGUF keys) via ``ModelShape.from_gguf``.

    Tokenizer arrays are dropped (they are large and say nothing about the cache). In a non-verbose body
    Ollama replaces arrays longer than 5 with ``[]``; such keys are dropped too, so the shape code sees them
    as missing (and marks the shape partial) rather than as empty.
    """
    if not isinstance(body, dict):
        raise SourceError(SourceFailure(FailureKind.UNEXPECTED_BODY, "/api/show did not return an object", "/api/show"))
    raw = body.get("model_info")
    if not isinstance(raw, dict):
        raw = {}
    info: dict[str, Any] = {}
    for k, v in raw.items():
        if not isinstance(k, str) or k.startswith("tokenizer."):
            continue
        if not verbose and isinstance(v, list) and not v:
            continue
        info[k] = v
    arch = json_str(info.get("general.architecture"))

    def arch_int(key: str) -> int | None:
        return json_int(info.get(f"{arch}.{key}")) if arch else None

    shape: Any = None
    shape_reason: str | None = None
    if not info:
        shape_reason = "/api/show returned no model_info"
    else:
        from kvmon.physics.layers import ShapeError
        from kvmon.physics.shape import ModelShape

        try:
            shape = ModelShape.from_gguf(info)
        except (ShapeError, ValueError, TypeError, KeyError) as e:
            shape_reason = f"model shape unreadable from /api/show: {e}"
        if shape is not None and not verbose:
            shape_reason = "per-layer arrays missing (Ollama blanks arrays longer than 5 without verbose)"
            shape = replace(shape, partial=True, notes=(*shape.notes, shape_reason))
    details = json_object(body.get("details"))
    n_params = json_int(info.get("general.parameter_count")) or parse_parameter_size(details.get("parameter_size"))
    return ShowInfo(
        arch=arch or json_str(details.get("family")),
        n_params=n_params,
        n_ctx_train=arch_int("context_length"),
        n_embd=arch_int("embedding_length"),
        weight_bytes=weight_bytes_from_tensors(body.get("tensors")),
        blob_path=blob_path_from_modelfile(body.get("modelfile")),
        shape=shape,
        shape_reason=shape_reason,
        n_tensors=len(body["tensors"]) if isinstance(body.get("tensors"), list) else 0,
    )


def server_summary(json: Callable[[str], Any]) -> tuple[str | None, str | None]:
    """(version, a few words on what it serves) for a list of servers, from ``json`` (a path's JSON body, None when
    it answered none)."""
    version = json("/api/version")
    ps = json("/api/ps")
    names = [str(m.get("name")) for m in (ps.get("models") or ()) if isinstance(m, Mapping)] if isinstance(
        ps, Mapping) else []
    v = json_str(version.get("version")) if isinstance(version, Mapping) else None
    return v, (f"loaded: {', '.join(names)}" if names else "no model loaded")
