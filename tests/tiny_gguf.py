"""Tiny random-weight GGUFs of many llama.cpp architectures, made at test time (a test helper, not kvmon code).

Each family is a few hundred KB to a few MB of F32 tensors with seeded weights, so the same family always gives
the same bytes. The tensor names and shapes are the ones llama.cpp b11549's loader asks for (its errors name
every missing tensor and wrong shape); the metadata keys are the ones its hparams loaders read. The models
talk nonsense by design: they exist to make the real server allocate its caches and decode.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gguf
import numpy as np

E, HEADS, HEADS_KV, HEAD_DIM, FF = 128, 4, 2, 32, 256  # the common trunk: 4 query heads, GQA 2, head 32
N_CTX_TRAIN = 8192
SWA_WINDOW = 128
EXPERTS, EXPERTS_USED, FF_EXPERT = 4, 2, 64
SSM = {"ssm.conv_kernel": 4, "ssm.inner_size": 256, "ssm.state_size": 16, "ssm.time_step_rank": 8,
       "ssm.group_count": 1}
_SSM_CONV_DIM = 256 + 2 * 16  # d_inner + 2·n_group·d_state
_SSM_IN = 2 * 256 + 2 * 16 + 8  # z, x, B, C, dt

# a SentencePiece vocabulary: unknown, BOS, EOS, the 256 byte tokens, a few pieces, then <|endoftext|>
# (llama.cpp's vocabulary loader looks that one up by name for models whose name says phi3)
TOKENS = (["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)] + ["▁"] + [chr(c) for c in range(97, 123)]
          + ["<|endoftext|>"])
TOKEN_TYPES = [2, 3, 3] + [6] * 256 + [1] * (len(TOKENS) - 260) + [3]
N_VOCAB = len(TOKENS)

Tensors = dict[str, tuple[int, ...]]  # name -> ggml shape (ne0 first)


@dataclass(frozen=True)
class Family:
    """One architecture as a GGUF: its ``general.architecture``, ``<arch>.*`` keys and tensors."""

    name: str
    arch: str
    keys: dict[str, Any]
    tensors: Callable[[], Tensors]
    notes: tuple[str, ...] = field(default=())

    @property
    def n_layers(self) -> int:
        return int(self.keys["block_count"])


def _attn(p: str, q: int = HEADS * HEAD_DIM, kv: int = HEADS_KV * HEAD_DIM, qk_norm: int = 0,
          v: bool = True) -> Tensors:
    t: Tensors = {f"{p}attn_q.weight": (E, q), f"{p}attn_k.weight": (E, kv), f"{p}attn_output.weight": (q, E)}
    if v:
        t[f"{p}attn_v.weight"] = (E, kv)
    if qk_norm:
        t[f"{p}attn_q_norm.weight"] = (qk_norm,)
        t[f"{p}attn_k_norm.weight"] = (qk_norm,)
    return t


def _ffn(p: str, ff: int = FF) -> Tensors:
    return {f"{p}ffn_gate.weight": (E, ff), f"{p}ffn_up.weight": (E, ff), f"{p}ffn_down.weight": (ff, E)}


def _moe(p: str, shared: int = 0) -> Tensors:
    t: Tensors = {f"{p}ffn_gate_inp.weight": (E, EXPERTS), f"{p}ffn_gate_exps.weight": (E, FF_EXPERT, EXPERTS),
                  f"{p}ffn_up_exps.weight": (E, FF_EXPERT, EXPERTS),
                  f"{p}ffn_down_exps.weight": (FF_EXPERT, E, EXPERTS)}
    if shared:
        t |= {f"{p}ffn_gate_shexp.weight": (E, shared), f"{p}ffn_up_shexp.weight": (E, shared),
              f"{p}ffn_down_shexp.weight": (shared, E)}
    return t


def _norms(p: str, *names: str) -> Tensors:
    return {f"{p}{n}.weight": (E,) for n in names}


def _mamba2(p: str) -> Tensors:
    return {f"{p}ssm_in.weight": (E, _SSM_IN), f"{p}ssm_conv1d.weight": (4, _SSM_CONV_DIM),
            f"{p}ssm_conv1d.bias": (_SSM_CONV_DIM,), f"{p}ssm_dt.bias": (8,), f"{p}ssm_a": (1, 8), f"{p}ssm_d": (1, 8),
            f"{p}ssm_norm.weight": (256, 1), f"{p}ssm_out.weight": (256, E)}


def _trunk(n_layers: int, layer: Callable[[int, str], Tensors], tied: bool = True) -> Tensors:
    t: Tensors = {"token_embd.weight": (E, N_VOCAB), "output_norm.weight": (E,)}
    if not tied:
        t["output.weight"] = (E, N_VOCAB)
    for il in range(n_layers):
        t |= layer(il, f"blk.{il}.")
    return t


def _dense(qk_norm: int = 0) -> Callable[[int, str], Tensors]:
    return lambda il, p: _norms(p, "attn_norm", "ffn_norm") | _attn(p, qk_norm=qk_norm) | _ffn(p)


def _gemma(qk_norm: int) -> Callable[[int, str], Tensors]:
    return lambda il, p: (_norms(p, "attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm")
                          | _attn(p, qk_norm=qk_norm) | _ffn(p))


_BASE = {"context_length": N_CTX_TRAIN, "embedding_length": E, "feed_forward_length": FF,
         "attention.head_count": HEADS, "attention.head_count_kv": HEADS_KV, "attention.key_length": HEAD_DIM,
         "attention.value_length": HEAD_DIM, "attention.layer_norm_rms_epsilon": 1e-5,
         "rope.dimension_count": HEAD_DIM}
_MOE = {"expert_count": EXPERTS, "expert_used_count": EXPERTS_USED, "expert_feed_forward_length": FF_EXPERT}

# deepseek2 MLA: one latent of kv_lora_rank + rope dims per token, K only
_MLA_KV_LORA, _MLA_ROPE, _MLA_NOPE, _MLA_V = 64, 32, 32, 32
_MLA = {**_BASE, **_MOE, "attention.head_count_kv": 1, "attention.key_length": _MLA_KV_LORA + _MLA_ROPE,
        "attention.value_length": _MLA_KV_LORA, "attention.key_length_mla": _MLA_NOPE + _MLA_ROPE,
        "attention.value_length_mla": _MLA_V, "attention.q_lora_rank": 64, "attention.kv_lora_rank": _MLA_KV_LORA,
        "rope.dimension_count": _MLA_ROPE, "expert_shared_count": 1, "leading_dense_block_count": 1}


def _deepseek2(n_layers: int, nextn: int) -> Callable[[], Tensors]:
    def layer(il: int, p: str) -> Tensors:
        t = _norms(p, "attn_norm", "ffn_norm") | {
            f"{p}attn_q_a_norm.weight": (64,), f"{p}attn_kv_a_norm.weight": (_MLA_KV_LORA,),
            f"{p}attn_q_a.weight": (E, 64), f"{p}attn_q_b.weight": (64, HEADS * (_MLA_NOPE + _MLA_ROPE)),
            f"{p}attn_kv_a_mqa.weight": (E, _MLA_KV_LORA + _MLA_ROPE),
            f"{p}attn_k_b.weight": (_MLA_NOPE, _MLA_KV_LORA, HEADS),
            f"{p}attn_v_b.weight": (_MLA_KV_LORA, _MLA_V, HEADS),
            f"{p}attn_output.weight": (HEADS * _MLA_V, E)}
        t |= _ffn(p) if il == 0 else _moe(p, shared=FF_EXPERT)
        if il >= n_layers - nextn:  # the multi-token-prediction block (GLM-4.7-Flash layout)
            t |= {f"{p}nextn.eh_proj.weight": (2 * E, E), f"{p}nextn.enorm.weight": (E,),
                  f"{p}nextn.hnorm.weight": (E,), f"{p}nextn.shared_head_norm.weight": (E,)}
        return t

    return lambda: _trunk(n_layers, layer)


def _qwen35(il: int, p: str) -> Tensors:
    t = _norms(p, "attn_norm", "post_attention_norm") | _ffn(p)
    if (il + 1) % 4 == 0:  # full attention, gated query (2x)
        gated = _attn(p, q=2 * HEADS * HEAD_DIM, qk_norm=HEAD_DIM)
        return t | gated | {f"{p}attn_output.weight": (HEADS * HEAD_DIM, E)}
    # gated delta net: key dim 2 heads x 32, value dim 4 heads x 32
    return t | {f"{p}attn_qkv.weight": (E, 256), f"{p}attn_gate.weight": (E, 128), f"{p}ssm_conv1d.weight": (4, 256),
                f"{p}ssm_dt.bias": (4,), f"{p}ssm_a": (4,), f"{p}ssm_beta.weight": (E, 4),
                f"{p}ssm_alpha.weight": (E, 4), f"{p}ssm_norm.weight": (32,), f"{p}ssm_out.weight": (128, E)}


_GRANITE_KV = [0, 0, HEADS_KV, 0]


def _granitehybrid(il: int, p: str) -> Tensors:
    t = _norms(p, "attn_norm", "ffn_norm") | _ffn(p)
    return t | (_attn(p) if _GRANITE_KV[il] else _mamba2(p))


# nemotron_h: Mamba2 layers (no KV heads, no FFN), an attention layer (KV heads, no FFN), an MLP-only layer
_NEMOTRON_KV, _NEMOTRON_FF = [0, 0, HEADS_KV, 0], [0, 0, 0, FF]


def _nemotron_h(il: int, p: str) -> Tensors:
    t = _norms(p, "attn_norm")
    if _NEMOTRON_KV[il]:
        return t | _attn(p)
    if _NEMOTRON_FF[il]:
        return t | {f"{p}ffn_up.weight": (E, FF), f"{p}ffn_down.weight": (FF, E)}
    return t | _mamba2(p)


def _falcon_h1(il: int, p: str) -> Tensors:
    # every layer has both a Mamba2 block and attention; its FFN norm is named without ".weight"
    return _mamba2(p) | {f"{p}attn_norm.weight": (E,), f"{p}ffn_norm": (E,)} | _attn(p) | _ffn(p)


def _rwkv7(il: int, p: str) -> Tensors:
    lora = 16
    t: Tensors = {f"{p}{n}.{wb}": (E,) for n in ("attn_norm", "attn_norm_2", "time_mix_ln")
                  for wb in ("weight", "bias")}
    for name in ("w", "a", "v"):
        t |= {f"{p}time_mix_{name}0.weight": (E,), f"{p}time_mix_{name}1.weight": (E, lora),
              f"{p}time_mix_{name}2.weight": (lora, E)}
    t |= {f"{p}time_mix_g1.weight": (E, lora), f"{p}time_mix_g2.weight": (lora, E),
          f"{p}time_mix_lerp_fused.weight": (E, 1, 1, 6), f"{p}time_mix_k_k.weight": (E,),
          f"{p}time_mix_k_a.weight": (E,), f"{p}time_mix_r_k.weight": (E,),
          f"{p}channel_mix_lerp_k.weight": (E, 1, 1), f"{p}channel_mix_key.weight": (E, FF),
          f"{p}channel_mix_value.weight": (FF, E)}
    for name in ("key", "value", "receptance", "output"):
        t[f"{p}time_mix_{name}.weight"] = (E, E)
    return t


def _rwkv7_all() -> Tensors:
    t = _trunk(2, _rwkv7, tied=False)
    return t | {"token_embd_norm.weight": (E,), "token_embd_norm.bias": (E,), "output_norm.bias": (E,)}


# gemma4: 4 layers with their own KV (3 sliding-window with 32-wide heads, 1 global with 64-wide K=V heads),
# then 2 layers that reuse the last SWA and the last global layer's cache
_GEMMA4_SWA = [True, True, True, False, True, False]
_GEMMA4_OWN_KV = 4
_PLE = 32  # per-layer embedding width


def _gemma4_layer(il: int, p: str) -> Tensors:
    d = HEAD_DIM if _GEMMA4_SWA[il] else 2 * HEAD_DIM
    t = _norms(p, "attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm", "post_norm") | _ffn(p)
    t |= {f"{p}attn_q.weight": (E, HEADS * d), f"{p}attn_output.weight": (HEADS * d, E), f"{p}attn_q_norm.weight": (d,),
          f"{p}inp_gate.weight": (E, _PLE), f"{p}proj.weight": (_PLE, E)}
    if il < _GEMMA4_OWN_KV:
        t |= {f"{p}attn_k.weight": (E, HEADS_KV * d), f"{p}attn_k_norm.weight": (d,)}
        if _GEMMA4_SWA[il]:
            t[f"{p}attn_v.weight"] = (E, HEADS_KV * d)
    return t


def _gemma4_all() -> Tensors:
    n = len(_GEMMA4_SWA)
    return _trunk(n, _gemma4_layer) | {"per_layer_token_embd.weight": (_PLE * n, N_VOCAB),
                                       "per_layer_model_proj.weight": (E, _PLE * n),
                                       "per_layer_proj_norm.weight": (_PLE,), "rope_freqs.weight": (HEAD_DIM,)}


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("llama", "llama", {**_BASE, "block_count": 4}, lambda: _trunk(4, _dense())),
    Family("llama-long", "llama", {**_BASE, "block_count": 4, "context_length": 4 * N_CTX_TRAIN},
           lambda: _trunk(4, _dense()),
           notes=("the llama family trained for 32K: a server with room for an 8K sweep",)),
    Family("llama-draft", "llama", {**_BASE, "block_count": 1}, lambda: _trunk(1, _dense()),
           notes=("one layer of the llama family's trunk: a draft model smaller than its target",)),
    Family("qwen3", "qwen3", {**_BASE, "block_count": 4}, lambda: _trunk(4, _dense(qk_norm=HEAD_DIM))),
    Family("qwen3moe", "qwen3moe", {**_BASE, **_MOE, "block_count": 4}, lambda: _trunk(
        4, lambda il, p: _norms(p, "attn_norm", "ffn_norm") | _attn(p, qk_norm=HEAD_DIM) | _moe(p))),
    Family("gemma2", "gemma2", {**_BASE, "block_count": 4, "attention.sliding_window": SWA_WINDOW,
                                "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0},
           lambda: _trunk(4, _gemma(qk_norm=0))),
    Family("gemma3", "gemma3", {**_BASE, "block_count": 6, "attention.sliding_window": SWA_WINDOW},
           lambda: _trunk(6, _gemma(qk_norm=HEAD_DIM))),
    Family("gpt-oss", "gpt-oss", {**_BASE, **_MOE, "block_count": 4, "attention.sliding_window": SWA_WINDOW},
           lambda: _trunk(4, lambda il, p: _norms(p, "attn_norm", "post_attention_norm") | _attn(p) | _moe(p) | {
               f"{p}attn_sinks.weight": (HEADS,), f"{p}attn_output.bias": (E,), f"{p}ffn_gate_inp.bias": (EXPERTS,),
               f"{p}ffn_gate_exps.bias": (FF_EXPERT, EXPERTS), f"{p}ffn_up_exps.bias": (FF_EXPERT, EXPERTS),
               f"{p}ffn_down_exps.bias": (E, EXPERTS)}, tied=False)),
    Family("deepseek2", "deepseek2", {**_MLA, "block_count": 3}, _deepseek2(3, 0)),
    Family("deepseek2-nextn", "deepseek2", {**_MLA, "block_count": 4, "nextn_predict_layers": 1}, _deepseek2(4, 1),
           notes=("3 trunk layers and one trailing multi-token-prediction block, as GLM-4.7-Flash ships",)),
    Family("llama4", "llama4", {**_BASE, **_MOE, "block_count": 4, "expert_used_count": 1,
                                "interleave_moe_layer_step": 1, "attention.sliding_window": 256},
           lambda: _trunk(4, lambda il, p: _norms(p, "attn_norm", "ffn_norm") | _attn(p) | _moe(p, shared=FF_EXPERT)),
           notes=("sliding_window 256 in the GGUF: llama.cpp ignores it and chunks attention at 8192",)),
    Family("phi3", "phi3", {**_BASE, "block_count": 2, "attention.sliding_window": 256},
           lambda: _trunk(2, lambda il, p: _norms(p, "attn_norm", "ffn_norm") | {
               f"{p}attn_qkv.weight": (E, E + 2 * HEADS_KV * HEAD_DIM), f"{p}attn_output.weight": (E, E),
               f"{p}ffn_up.weight": (E, 2 * FF), f"{p}ffn_down.weight": (FF, E)}),
           notes=("sliding_window 256 in the GGUF: llama.cpp disables Phi's SWA",)),
    Family("qwen35", "qwen35", {**_BASE, "block_count": 4, "ssm.conv_kernel": 4, "ssm.inner_size": 128,
                                "ssm.state_size": 32, "ssm.time_step_rank": 4, "ssm.group_count": 2,
                                "full_attention_interval": 4, "rope.dimension_count": 16,
                                "rope.dimension_sections": [4, 6, 6, 0]}, lambda: _trunk(4, _qwen35)),
    Family("granitehybrid", "granitehybrid", {**_BASE, **SSM, "block_count": 4,
                                              "attention.head_count_kv": _GRANITE_KV},
           lambda: _trunk(4, _granitehybrid)),
    Family("nemotron_h", "nemotron_h", {**_BASE, **SSM, "block_count": 4, "attention.head_count_kv": _NEMOTRON_KV,
                                        "feed_forward_length": _NEMOTRON_FF, "attention.layer_norm_epsilon": 1e-5},
           lambda: _trunk(4, _nemotron_h)),
    Family("falcon-h1", "falcon-h1", {**_BASE, **SSM, "block_count": 2}, lambda: _trunk(2, _falcon_h1)),
    Family("mamba2", "mamba2", {"context_length": N_CTX_TRAIN, "embedding_length": E, "block_count": 2,
                                "attention.layer_norm_rms_epsilon": 1e-5, **SSM},
           lambda: _trunk(2, lambda il, p: _norms(p, "attn_norm") | _mamba2(p))),
    Family("rwkv7", "rwkv7", {"context_length": N_CTX_TRAIN, "embedding_length": E, "block_count": 2,
                              "feed_forward_length": FF, "attention.layer_norm_epsilon": 1e-5, "wkv.head_size": 32,
                              "attention.decay_lora_rank": 16, "attention.iclr_lora_rank": 16,
                              "attention.value_residual_mix_lora_rank": 16, "attention.gate_lora_rank": 16,
                              "token_shift_count": 2}, _rwkv7_all),
    Family("gemma4", "gemma4", {**_BASE, "block_count": 6, "attention.sliding_window": SWA_WINDOW,
                                "attention.sliding_window_pattern": _GEMMA4_SWA,
                                "attention.shared_kv_layers": len(_GEMMA4_SWA) - _GEMMA4_OWN_KV,
                                "attention.key_length": 2 * HEAD_DIM, "attention.value_length": 2 * HEAD_DIM,
                                "attention.key_length_swa": HEAD_DIM, "attention.value_length_swa": HEAD_DIM,
                                "embedding_length_per_layer_input": _PLE}, _gemma4_all),
)}


def _add_key(w: gguf.GGUFWriter, key: str, value: Any) -> None:
    if isinstance(value, bool):
        w.add_bool(key, value)
    elif isinstance(value, int):
        w.add_uint32(key, value)
    elif isinstance(value, float):
        w.add_float32(key, value)
    elif isinstance(value, list):
        w.add_array(key, value)
    else:
        raise TypeError(f"{key}: unsupported metadata value {value!r}")


def write_family(family: Family, path: Path) -> Path:
    """Write ``family`` as a GGUF at ``path``: seeded weights (norms at 1), the vocabulary, a ChatML template."""
    rng = np.random.default_rng(zlib.crc32(family.name.encode()))
    w = gguf.GGUFWriter(str(path), family.arch)
    w.add_name(f"tiny-{family.name}")
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    for key, value in family.keys.items():
        _add_key(w, f"{family.arch}.{key}", value)
    w.add_tokenizer_model("llama")
    w.add_token_list(TOKENS)
    w.add_token_scores([0.0] * N_VOCAB)
    w.add_token_types(TOKEN_TYPES)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_chat_template("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                        "{% endfor %}<|im_start|>assistant\n")
    for name, ne in family.tensors().items():
        shape = tuple(reversed(ne))  # numpy order is ggml's reversed
        if name.endswith("norm.weight") or name.endswith("_norm") or name.endswith("ffn_norm"):
            data = np.ones(shape, dtype=np.float32)
        else:
            data = (rng.standard_normal(shape) * 0.05).astype(np.float32)
        w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def make_gguf(name: str, directory: Path) -> Path:
    """The GGUF of family ``name`` in ``directory``, written once and reused (the directory is the cache)."""
    family = FAMILIES[name]
    path = directory / f"tiny-{name}.gguf"
    if not path.exists():
        tmp = directory / f".tiny-{name}.gguf.part"
        write_family(family, tmp)
        tmp.replace(path)
    return path


def metadata(name: str) -> dict[str, Any]:
    """The family's GGUF metadata as kvmon's GGUF reader returns it (without the vocabulary), for unit tests."""
    family = FAMILIES[name]
    return {"general.architecture": family.arch, **{f"{family.arch}.{k}": v for k, v in family.keys.items()}}
