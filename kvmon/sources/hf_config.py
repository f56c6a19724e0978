"""A Hugging Face model folder on this machine (the ``root`` vLLM reports for a model): its ``config.json`` as the
model shape kvmon's physics reads, its dtype, and its weights as the safetensors headers give them (never the data).

vLLM sizes a layer's KV page from the HF config (``vllm/transformers_utils/config.py`` and
``model_arch_config_convertor.py``): KV heads from the first of ``num_key_value_heads``, ``num_kv_heads``,
``n_head_kv``, ``multi_query_group_num``, else ``num_attention_heads``; head size ``head_dim`` else
``hidden_size // num_attention_heads``; ``num_hidden_layers`` layers. Those become the GGUF keys of a model with
full attention on every layer, so the same ``ModelShape`` serves both servers. Configs whose layers are not all
plain full attention (MLA latents, sliding windows, hybrid state layers) get no shape, with the reason: kvmon
does not guess their per-token size. A repository id (``Qwen/Qwen3-8B``) is looked up in the local Hugging Face
cache (``$HF_HUB_CACHE``, ``$HF_HOME/hub``, ``~/.cache/huggingface/hub``), read-only; nothing is downloaded.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvmon.core.jsonvals import InputError, json_int, json_str, parse_json
from kvmon.physics.tensors import parameter_count
from kvmon.sources.localfile import read_from
from kvmon.sources.safetensors_meta import folder_weights

MAX_CONFIG_BYTES = 1 << 20  # a config.json is a few KiB; more is not one
# torch dtype names in config.json → the cache-type name kvmon's tables use for the same element size
DTYPES = {"bfloat16": "bf16", "float16": "f16", "half": "f16", "float32": "f32", "float": "f32"}
_KV_HEAD_KEYS = ("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num", "num_attention_groups")
_NOT_PLAIN = (("kv_lora_rank", "multi-head latent attention (MLA)"),
              ("layers_block_type", "a hybrid of attention and state layers"),
              ("attn_type_list", "a hybrid of attention and linear-attention layers"),
              ("full_attention_interval", "a hybrid of attention and linear-attention layers"),
              ("mamba_d_state", "a hybrid of attention and Mamba layers"),
              ("attention_chunk_size", "chunked local attention on some layers"))


@dataclass(frozen=True)
class HfModel:
    """What one HF model folder says: GGUF-keyed metadata for the shape (None + why), dtype, the weight bytes its
    safetensors headers give (None + why), its parameter count and how its weights are stored."""

    folder: str
    metadata: Mapping[str, Any] | None
    why_not: str | None
    dtype: str | None  # bf16 | f16 | f32, or None when config.json does not say
    weight_bytes: int | None
    arch: str | None = None
    weights_why: str | None = None  # why weight_bytes is unknown
    weights_note: str | None = None  # how it was read ("3 safetensors headers, BF16")
    n_params: int | None = None  # from the architecture's tensor inventory (computed), None when not covered
    storage: str | None = None  # the weights' type for an estimate: the dtype (BF16), or the quantization method


def hub_cache_dirs(environ: Mapping[str, str] | None = None) -> list[str]:
    """Where a local Hugging Face cache may be, first match wins (``huggingface_hub.constants`` order)."""
    env = os.environ if environ is None else environ
    out = [env.get("HF_HUB_CACHE", "")]
    if env.get("HF_HOME"):
        out.append(os.path.join(env["HF_HOME"], "hub"))
    out.append(os.path.join(os.path.expanduser("~"), ".cache", "huggingface", "hub"))
    return [d for d in out if d]


def model_folder(root: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The folder holding ``config.json`` for vLLM's ``root``: an absolute path, or a repo id found in the local HF
    cache. A relative path is the server's, relative to a working directory kvmon does not know: not looked up."""
    if os.path.isabs(root):
        return root if os.path.isdir(root) else None
    if "/" not in root or root.startswith(("/", ".")) or root.count("/") != 1:
        return None
    name = "models--" + root.replace("/", "--")
    for cache in hub_cache_dirs(environ):
        snaps = sorted(glob.glob(os.path.join(glob.escape(cache), name, "snapshots", "*", "config.json")),
                       key=lambda p: os.stat(p).st_mtime if os.path.exists(p) else 0.0)
        if snaps:
            return os.path.dirname(snaps[-1])
    return None


def _text_config(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """A multimodal config's language model part (``text_config``), else the config itself."""
    inner = cfg.get("text_config")
    return inner if isinstance(inner, Mapping) and "num_hidden_layers" in inner else cfg


def config_metadata(cfg: Any) -> tuple[dict[str, Any] | None, str | None, str | None]:
    """(GGUF-keyed metadata of a full-attention model, why not, arch) from a parsed ``config.json``."""
    if not isinstance(cfg, Mapping):
        return None, "config.json is not a JSON object", None
    c = _text_config(cfg)
    arch = json_str(c.get("model_type")) or json_str(cfg.get("model_type")) or "unknown"
    for key, what in _NOT_PLAIN:
        if c.get(key) not in (None, 0, [], ""):
            return None, f"{arch} is {what}: its KV bytes per token are not read from config.json", arch
    layer_types = c.get("layer_types")
    if isinstance(layer_types, list) and any(t != "full_attention" for t in layer_types):
        return None, f"{arch} mixes attention kinds per layer (layer_types): not sized from config.json", arch
    if c.get("use_sliding_window") is True or (c.get("sliding_window") not in (None, 0)
                                               and c.get("use_sliding_window") is not False):
        return None, f"{arch} uses sliding-window attention: not sized from config.json", arch
    n_layers = json_int(c.get("num_hidden_layers"))
    hidden = json_int(c.get("hidden_size"))
    heads = json_int(c.get("num_attention_heads"))
    if not n_layers or not hidden or not heads:
        return None, "config.json lacks num_hidden_layers, hidden_size or num_attention_heads", arch
    kv_heads = next((json_int(c.get(k)) for k in _KV_HEAD_KEYS if json_int(c.get(k))), None) or heads
    head_dim = json_int(c.get("head_dim")) or hidden // heads
    md: dict[str, Any] = {
        "general.architecture": arch,
        f"{arch}.block_count": n_layers,
        f"{arch}.embedding_length": hidden,
        f"{arch}.attention.head_count": heads,
        f"{arch}.attention.head_count_kv": kv_heads,
        f"{arch}.attention.key_length": head_dim,
        f"{arch}.attention.value_length": head_dim,
    }
    for key, gguf in (("max_position_embeddings", "context_length"), ("intermediate_size", "feed_forward_length"),
                      ("vocab_size", "vocab_size")):
        v = json_int(c.get(key))
        if v:
            md[f"{arch}.{gguf}"] = v
    experts = json_int(c.get("num_experts")) or json_int(c.get("num_local_experts"))
    used = json_int(c.get("num_experts_per_tok"))
    if experts and used:
        md[f"{arch}.expert_count"] = experts
        md[f"{arch}.expert_used_count"] = used
    return md, None, arch


def config_dtype(cfg: Any) -> str | None:
    """The checkpoint's dtype (``torch_dtype``, or ``dtype`` in newer transformers) as bf16/f16/f32, else None."""
    if not isinstance(cfg, Mapping):
        return None
    for c in (_text_config(cfg), cfg):
        name = json_str(c.get("torch_dtype")) or json_str(c.get("dtype"))
        if name:
            return DTYPES.get(name.removeprefix("torch.").lower())
    return None


def read_model(folder: str) -> HfModel:
    """The model in ``folder``; a missing or unreadable ``config.json`` is a reason, never an exception."""
    path = os.path.join(folder, "config.json")
    try:
        raw, size = read_from(path, 0, MAX_CONFIG_BYTES + 1)
    except OSError as e:
        return HfModel(folder, None, f"config.json not readable here ({e.strerror or 'error'})", None, None)
    if size > MAX_CONFIG_BYTES:
        return HfModel(folder, None, f"config.json is {size:,} bytes: too large to be a model config", None, None)
    try:
        cfg = parse_json(raw)
    except InputError as e:
        return HfModel(folder, None, f"config.json is not readable JSON: {e}", None, None)
    md, why, arch = config_metadata(cfg)
    dtype = config_dtype(cfg)
    found = folder_weights(folder)
    note = (f"summed from the {found.n_files} safetensors header{'s' * (found.n_files > 1)} of the model folder "
            f"({found.n_tensors} tensors, {', '.join(found.dtypes)})") if found.weight_bytes is not None else None
    c = _text_config(cfg) if isinstance(cfg, Mapping) else {}
    tied = c.get("tie_word_embeddings", cfg.get("tie_word_embeddings") if isinstance(cfg, Mapping) else None)
    n_params = parameter_count(md, tied=tied if isinstance(tied, bool) else False) if md else None
    quant = c.get("quantization_config") or (cfg.get("quantization_config") if isinstance(cfg, Mapping) else None)
    storage = (json_str(quant.get("quant_method")) if isinstance(quant, Mapping) else None) if quant else \
        (dtype.upper() if dtype else None)
    return HfModel(folder, md, why, dtype, found.weight_bytes, arch, weights_why=found.why_not, weights_note=note,
                   n_params=n_params, storage=storage)
