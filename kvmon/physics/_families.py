"""Per-architecture rules that turn GGUF metadata into per-layer storage (llama.cpp's hparams logic).

Kept apart from shape.py so the dataclasses stay small; ``shape_fields`` is the only entry point: it gives the
fields of a ``kvmon.physics.shape.ModelShape``, which ``ModelShape.from_gguf`` builds (so this module needs only
the per-layer vocabulary of ``kvmon.physics.layers``, and the two modules do not import each other).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping
from typing import Any

from kvmon.physics.layers import (
    AttentionKind,
    LayerShape,
    ShapeError,
    as_int,
    per_layer,
    plain,
)

MAX_LAYERS = 10_000  # far above any real model; guards against corrupt headers

# Architectures whose every layer is plain full attention in llama.cpp (GQA or not).
DENSE_ARCHS = frozenset(
    {
        "llama", "qwen2", "qwen3", "qwen2moe", "qwen3moe", "mistral", "mistral3", "phi3", "gemma",
        "granite", "granitemoe", "deepseek", "olmo", "olmo2", "command-r", "starcoder2", "internlm2",
        "stablelm", "exaone", "glm4", "glm4moe", "minicpm", "smollm3", "ernie4_5", "ernie4_5-moe", "seed_oss",
        "qwen2vl", "qwen3vl", "qwen3vlmoe", "falcon", "baichuan", "gptneox", "gpt2", "mpt", "bloom", "starcoder",
    }
)
HYBRID_INTERVAL_ARCHS = frozenset({"qwen3next", "qwen35", "qwen35moe"})
HEADCOUNT_HYBRID_ARCHS = frozenset({"granitehybrid", "jamba"})
MAMBA_ARCHS = frozenset({"mamba", "mamba2"})
RWKV_ARCHS = frozenset({"rwkv6", "rwkv7", "rwkv6qwen2", "arwkv7"})


class _Meta:
    """Typed access to ``<arch>.*`` keys with the plain-value conversion applied."""

    def __init__(self, metadata: Mapping[str, Any], arch: str) -> None:
        self.md = metadata
        self.arch = arch

    def raw(self, key: str) -> Any:
        return self.md.get(f"{self.arch}.{key}")

    def has(self, key: str) -> bool:
        return f"{self.arch}.{key}" in self.md

    def int(self, key: str, default: int | None = None) -> int | None:
        value = self.raw(key)
        if value is None:
            return default
        v = plain(value)
        if isinstance(v, list):
            if not v:
                return default
            # a per-layer array where a scalar is expected: take the largest entry (heads, lengths)
            return max(as_int(x, f"{self.arch}.{key}") for x in v)
        return as_int(v, f"{self.arch}.{key}")

    # past `def int` above, `int` in this class body names that method: the type is spelt builtins.int
    def need_int(self, key: str) -> builtins.int:
        value = self.int(key)
        if value is None:
            raise ShapeError(f"missing {self.arch}.{key}")
        return value

    def layers(self, key: str, n_layers: builtins.int) -> list[builtins.int] | None:
        value = self.raw(key)
        return None if value is None else per_layer(value, n_layers, f"{self.arch}.{key}")


def _vocab_size(md: Mapping[str, Any], m: _Meta) -> int | None:
    size = m.int("vocab_size")
    if size is not None:
        return size
    tokens = md.get("tokenizer.ggml.tokens")
    if tokens is not None and hasattr(tokens, "__len__") and len(tokens) > 0:
        return len(tokens)
    return None


def _swa_flags(m: _Meta, n_layers: int, default_period: int | None, notes: list[str]) -> list[bool] | None:
    """Which layers use the sliding window: per-layer bool array, or a period n (every n-th layer is full)."""
    raw = m.raw("attention.sliding_window_pattern")
    v = plain(raw) if raw is not None else None
    if isinstance(v, list) and v:
        if len(v) != n_layers:
            raise ShapeError(f"{m.arch}.attention.sliding_window_pattern has {len(v)} entries for {n_layers} layers")
        return [bool(x) for x in v]
    if isinstance(v, list):
        notes.append("sliding_window_pattern array was empty (trimmed by Ollama /api/show?); period assumed")
        v = None
    period = as_int(v, f"{m.arch}.attention.sliding_window_pattern") if v is not None else default_period
    if period is None:
        return None
    # llama.cpp set_swa_pattern(n): layer il is SWA iff il % n < n - 1 (n == 0: all SWA)
    return [period == 0 or (il % period) < (period - 1) for il in range(n_layers)]


def _ssm_state_elements(m: _Meta) -> int:
    """Mamba / Mamba2 / gated-delta-net state per layer and sequence: conv state + SSM state (elements)."""
    d_conv = m.int("ssm.conv_kernel", 0) or 0
    d_inner = m.int("ssm.inner_size", 0) or 0
    d_state = m.int("ssm.state_size", 0) or 0
    n_group = m.int("ssm.group_count", 0) or 0
    if d_inner == 0 or d_state == 0:
        raise ShapeError(f"missing {m.arch}.ssm.inner_size / ssm.state_size for the recurrent layers")
    conv = (d_conv - 1 if d_conv > 0 else 0) * (d_inner + 2 * n_group * d_state)
    return conv + d_state * d_inner


def _rwkv_state_elements(m: _Meta, n_embd: int) -> int:
    head_size = m.int("wkv.head_size")
    if not head_size:
        raise ShapeError(f"missing {m.arch}.wkv.head_size")
    shift = m.int("token_shift_count", 2) or 2
    return shift * n_embd + n_embd * head_size


def shape_fields(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """A ModelShape's fields: the generic keys, then the architecture's own rules (unknown ones get the generic)."""
    if not isinstance(metadata, Mapping):
        raise ShapeError(f"metadata is {type(metadata).__name__}, not a mapping of GGUF keys")
    arch = plain(metadata.get("general.architecture"))
    if not isinstance(arch, str) or not arch.strip():
        raise ShapeError("missing general.architecture")
    arch = arch.strip()
    m = _Meta(metadata, arch)
    notes: list[str] = []
    partial = False

    n_layers = m.need_int("block_count")
    if not 0 < n_layers <= MAX_LAYERS:
        raise ShapeError(f"{arch}.block_count is {n_layers}, outside 1..{MAX_LAYERS}")
    n_embd = m.need_int("embedding_length")
    if n_embd <= 0:
        raise ShapeError(f"{arch}.embedding_length is {n_embd}")

    recurrent_only = arch in MAMBA_ARCHS or arch in RWKV_ARCHS
    heads = m.layers("attention.head_count", n_layers)
    if heads is None and m.has("attention.head_count"):
        raise ShapeError(f"{arch}.attention.head_count is an empty array (trimmed metadata); cannot size the layers")
    if heads is None and not recurrent_only:
        raise ShapeError(f"missing {arch}.attention.head_count")
    heads = heads or [0] * n_layers
    n_head = max(heads)

    heads_kv = m.layers("attention.head_count_kv", n_layers)
    if heads_kv is None and m.has("attention.head_count_kv"):
        raise ShapeError(
            f"{arch}.attention.head_count_kv is an empty array: Ollama's /api/show trims per-layer arrays unless "
            "asked with verbose=true, so the KV heads per layer are unknown"
        )
    if heads_kv is None:
        heads_kv = list(heads)
        if not recurrent_only and n_head:
            notes.append("no attention.head_count_kv: KV heads = attention heads (no GQA)")
    for il, (h, hk) in enumerate(zip(heads, heads_kv, strict=True)):
        if h and hk > h:
            raise ShapeError(f"layer {il}: {hk} KV heads exceed {h} attention heads")

    default_head_dim = n_embd // n_head if n_head else 0
    key_length = m.int("attention.key_length", default_head_dim) or 0
    value_length = m.int("attention.value_length", default_head_dim) or 0
    key_length_swa = m.int("attention.key_length_swa", key_length) or key_length
    value_length_swa = m.int("attention.value_length_swa", value_length) or value_length
    if not recurrent_only and (key_length <= 0 or value_length <= 0):
        raise ShapeError(f"{arch}: cannot tell the key/value head length (no key_length and no head count)")

    n_ctx_train = m.int("context_length")
    window = m.int("attention.sliding_window")

    def full(il: int, kind: AttentionKind = AttentionKind.FULL, win: int | None = None, swa_dims: bool = False,
             rec: int = 0) -> LayerShape:
        kl, vl = (key_length_swa, value_length_swa) if swa_dims else (key_length, value_length)
        return LayerShape(il, kind, heads_kv[il], kl, vl, window=win, recurrent_elements=rec)

    def swa_layers(flags: list[bool] | None, win: int | None, kind: AttentionKind) -> list[LayerShape]:
        if flags is None or not win:
            return [full(il) for il in range(n_layers)]
        return [full(il, kind, win, swa_dims=True) if flags[il] else full(il) for il in range(n_layers)]

    layers: list[LayerShape]
    if arch in DENSE_ARCHS:
        layers = [full(il) for il in range(n_layers)]
        if arch == "phi3" and window:
            notes.append("phi3 sliding window is disabled in llama.cpp: all layers cache the full context")
    elif arch == "gemma2":
        win = window or 4096
        if window is None:
            notes.append("gemma2: no sliding_window key, llama.cpp's 4096 assumed")
        layers = swa_layers(_swa_flags(m, n_layers, 2, notes), win, AttentionKind.SWA)
    elif arch == "gemma3":
        layers = swa_layers(_swa_flags(m, n_layers, 6, notes), window, AttentionKind.SWA)
    elif arch == "cohere2":  # Command R7B / A: 3 sliding-window layers, then 1 global
        layers = swa_layers(_swa_flags(m, n_layers, 4, notes), window, AttentionKind.SWA)
    elif arch == "gpt-oss":
        if not window:
            raise ShapeError("gpt-oss: missing gpt-oss.attention.sliding_window")
        layers = swa_layers(_swa_flags(m, n_layers, 2, notes), window, AttentionKind.SWA)
    elif arch == "llama4":
        # llama.cpp sets the chunk to 8192 whatever sliding_window says; a key of 0 turns chunking off
        chunk = 0 if window == 0 else 8192
        if window not in (None, 0, 8192):
            notes.append(f"llama4 sliding_window {window} in the GGUF: llama.cpp chunks attention at 8192 anyway")
        layers = swa_layers(_swa_flags(m, n_layers, 4, notes) if chunk else None, chunk, AttentionKind.CHUNKED)
        if chunk == 0:
            notes.append("llama4 with sliding_window = 0: chunked attention disabled, all layers full")
    elif arch in ("gemma3n", "gemma4"):
        if arch == "gemma4" and window and not m.has("attention.sliding_window_pattern"):
            partial = True
            notes.append("gemma4 without sliding_window_pattern: 5 windowed : 1 global assumed")
        layers = _shared_kv_layers(arch, m, n_layers, window, full, notes)
    elif arch == "deepseek2":
        layers, partial = _deepseek2(m, n_layers, full, notes)
    elif arch in HYBRID_INTERVAL_ARCHS:
        layers, partial = _interval_hybrid(m, n_layers, full, notes)
    elif arch in HEADCOUNT_HYBRID_ARCHS:
        rec = _ssm_state_elements(m) if any(hk == 0 for hk in heads_kv) else 0
        layers = [LayerShape(il, AttentionKind.RECURRENT, recurrent_elements=rec) if heads_kv[il] == 0 else full(il)
                  for il in range(n_layers)]
    elif arch == "nemotron_h":
        layers = _nemotron_h(m, n_layers, heads_kv, full)
    elif arch == "falcon-h1":
        rec = _ssm_state_elements(m)
        layers = [full(il, rec=rec) for il in range(n_layers)]
    elif arch in MAMBA_ARCHS:
        rec = _ssm_state_elements(m)
        layers = [LayerShape(il, AttentionKind.RECURRENT, recurrent_elements=rec) for il in range(n_layers)]
    elif arch in RWKV_ARCHS:
        rec = _rwkv_state_elements(m, n_embd)
        layers = [LayerShape(il, AttentionKind.RECURRENT, recurrent_elements=rec) for il in range(n_layers)]
    else:
        notes.append(f"unknown architecture {arch!r}: generic {arch}.* keys used, every layer taken as full attention")
        partial = True
        flags = _swa_flags(m, n_layers, None, notes) if window else None
        if window and flags is None:
            notes.append(f"{arch}.attention.sliding_window = {window} without a pattern: not applied")
        layers = swa_layers(flags, window, AttentionKind.SWA)

    nextn = m.int("nextn_predict_layers", 0) or 0
    mtp_layers: tuple[LayerShape, ...] = ()
    if 0 < nextn < n_layers:
        # multi-token-prediction layers at the end are not trunk layers: llama.cpp's main context filters them out
        # of its KV cache (n_layer() = block_count - nextn_predict_layers), deepseek2 / GLM-4.7-Flash included; with
        # --spec-type draft-mtp they are the drafter, and a context of their own caches them as they are
        mtp_layers = tuple(layers[n_layers - nextn:])
        for il in range(n_layers - nextn, n_layers):
            layers[il] = LayerShape(il, AttentionKind.NONE)
        notes.append(f"last {nextn} layer(s) are multi-token-prediction layers without a KV cache")

    expert_count = m.int("expert_count", 0) or 0
    expert_used = m.int("expert_used_count", 0) or 0
    if expert_used > expert_count > 0:
        raise ShapeError(f"{arch}: expert_used_count {expert_used} > expert_count {expert_count}")
    if expert_count > 1 and expert_used == 0:
        partial = True
        notes.append(f"{arch}.expert_used_count missing: MoE weight reads cannot be estimated")

    return dict(
        arch=arch,
        n_layers=n_layers,
        layers=tuple(layers),
        n_embd=n_embd,
        n_head=n_head,
        n_ctx_train=n_ctx_train,
        expert_count=expert_count,
        expert_used_count=expert_used,
        partial=partial,
        notes=tuple(notes),
        expert_shared_count=m.int("expert_shared_count", 0) or 0,
        feed_forward_length=m.int("feed_forward_length"),
        expert_feed_forward_length=m.int("expert_feed_forward_length"),
        leading_dense_block_count=m.int("leading_dense_block_count", 0) or 0,
        vocab_size=_vocab_size(metadata, m),
        key_length_mla=m.int("attention.key_length_mla"),
        value_length_mla=m.int("attention.value_length_mla"),
        mtp_layers=mtp_layers,
    )


_Full = Callable[..., LayerShape]


def _shared_kv_layers(arch: str, m: _Meta, n_layers: int, window: int | None, full: _Full,
                      notes: list[str]) -> list[LayerShape]:
    """gemma3n / gemma4: SWA pattern, and the last layers reuse the KV of the last earlier layer of their kind."""
    if arch == "gemma3n":
        kv_from_start = min(20, n_layers)  # hard-coded in llama.cpp
        flags = _swa_flags(m, n_layers, 5, notes)
    else:
        shared = m.int("attention.shared_kv_layers", 0) or 0
        if shared >= n_layers:
            raise ShapeError(f"gemma4: shared_kv_layers {shared} >= block_count {n_layers}")
        kv_from_start = n_layers - shared
        flags = _swa_flags(m, n_layers, 6, notes)
    if not window:
        flags = None
    layers: list[LayerShape] = []
    for il in range(n_layers):
        is_swa = bool(flags and flags[il])
        if il < kv_from_start:
            layers.append(full(il, AttentionKind.SWA, window, swa_dims=True) if is_swa else full(il))
            continue
        source = next((j for j in range(kv_from_start - 1, -1, -1) if bool(flags and flags[j]) == is_swa), None)
        if source is None:
            raise ShapeError(f"{arch}: layer {il} shares KV but no earlier layer of its kind exists")
        src = layers[source]
        layers.append(LayerShape(il, AttentionKind.SHARED, src.n_head_kv, src.key_length, src.value_length,
                                 window=src.window, shares_kv_with=source))
    return layers


def _deepseek2(m: _Meta, n_layers: int, full: _Full, notes: list[str]) -> tuple[list[LayerShape], bool]:
    """MLA GGUFs (key_length_mla present) cache one latent of kv_lora_rank + rope dims in K; older ones cache K/V."""
    if m.has("attention.key_length_mla"):
        layers = [full(il, AttentionKind.MLA) for il in range(n_layers)]
        if any(layer.n_head_kv != 1 for layer in layers):
            notes.append("MLA model with head_count_kv != 1: latent counted once per KV head as the metadata says")
        return layers, False
    notes.append("deepseek2 GGUF without MLA keys (older conversion): full per-head K and V cached")
    return [full(il) for il in range(n_layers)], False


def _interval_hybrid(m: _Meta, n_layers: int, full: _Full, notes: list[str]) -> tuple[list[LayerShape], bool]:
    """qwen3next / qwen35: gated-delta-net layers hold a recurrent state; every n-th layer is full attention."""
    partial = False
    raw = m.raw("attention.recurrent_layers")
    flags: list[bool] | None = None
    if raw is not None:
        v = plain(raw)
        if isinstance(v, list) and v:
            if len(v) != n_layers:
                raise ShapeError(f"{m.arch}.attention.recurrent_layers has {len(v)} entries for {n_layers} layers")
            flags = [bool(x) for x in v]
        elif isinstance(v, list):
            partial = True
            notes.append("attention.recurrent_layers was trimmed (Ollama /api/show): layout from the interval")
        else:
            flags = [bool(v)] * n_layers
    if flags is None:
        interval = m.int("full_attention_interval")
        if interval is None:
            interval = 4
            notes.append("no full_attention_interval: llama.cpp's default 4 assumed")
        if interval <= 0:
            raise ShapeError(f"{m.arch}.full_attention_interval is {interval}")
        flags = [(il + 1) % interval != 0 for il in range(n_layers)]
    rec = _ssm_state_elements(m) if any(flags) else 0
    return [LayerShape(il, AttentionKind.RECURRENT, recurrent_elements=rec) if flags[il] else full(il)
            for il in range(n_layers)], partial


def _nemotron_h(m: _Meta, n_layers: int, heads_kv: list[int], full: _Full) -> list[LayerShape]:
    """nemotron_h: Mamba2 layers (no KV heads, no FFN), attention layers (KV heads), and MLP-only layers."""
    ff = m.layers("feed_forward_length", n_layers)
    if ff is None:
        raise ShapeError("nemotron_h: feed_forward_length per layer is missing or trimmed; layer kinds unknown")
    rec = _ssm_state_elements(m) if any(hk == 0 and f == 0 for hk, f in zip(heads_kv, ff, strict=True)) else 0
    layers: list[LayerShape] = []
    for il in range(n_layers):
        if heads_kv[il] == 0 and ff[il] == 0:
            layers.append(LayerShape(il, AttentionKind.RECURRENT, recurrent_elements=rec))
        elif heads_kv[il] > 0:
            layers.append(full(il))
        else:
            layers.append(LayerShape(il, AttentionKind.NONE))
    return layers
