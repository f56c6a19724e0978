"""Real model shapes as GGUF metadata, for the simulator, demos, tests and "what if" views.

Values follow each model's published config (layers, heads, KV heads, head sizes, windows, experts) mapped to
llama.cpp's GGUF keys; weight sizes are those of a common GGUF of the named quantization (rounded).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvmon.physics.shape import ModelShape


@dataclass(frozen=True)
class Preset:
    """A named model: its GGUF metadata, the bytes of its weights in one quantization, and that quantization."""

    key: str
    display_name: str
    metadata: dict[str, Any] = field(hash=False)
    weight_bytes: int
    quantization: str

    def shape(self) -> ModelShape:
        """The ModelShape these keys describe."""
        return ModelShape.from_gguf(self.metadata)


def _md(arch: str, **keys: Any) -> dict[str, Any]:
    """GGUF keys for ``arch``: ``block_count=32`` → ``"<arch>.block_count": 32``; ``__`` becomes a dot."""
    out: dict[str, Any] = {"general.architecture": arch}
    for k, v in keys.items():
        out[f"{arch}.{k.replace('__', '.')}"] = v
    return out


def _llama(layers: int, embd: int, heads: int, kv: int, ff: int, ctx: int, vocab: int) -> dict[str, Any]:
    return _md("llama", block_count=layers, embedding_length=embd, attention__head_count=heads,
               attention__head_count_kv=kv, feed_forward_length=ff, context_length=ctx, vocab_size=vocab,
               rope__dimension_count=embd // heads)


_GB = 1_000_000_000

PRESETS: dict[str, Preset] = {
    p.key: p
    for p in (
        Preset("llama-3.1-8b", "Llama 3.1 8B Instruct",
               _llama(32, 4096, 32, 8, 14336, 131072, 128256), int(4.92 * _GB), "Q4_K_M"),
        Preset("llama-3.1-70b", "Llama 3.1 70B Instruct",
               _llama(80, 8192, 64, 8, 28672, 131072, 128256), int(42.5 * _GB), "Q4_K_M"),
        Preset("llama-2-7b", "Llama 2 7B",
               _llama(32, 4096, 32, 32, 11008, 4096, 32000), int(4.08 * _GB), "Q4_K_M"),
        Preset("llama-2-13b", "Llama 2 13B",
               _llama(40, 5120, 40, 40, 13824, 4096, 32000), int(7.87 * _GB), "Q4_K_M"),
        Preset("llama-2-70b", "Llama 2 70B",
               _llama(80, 8192, 64, 8, 28672, 4096, 32000), int(41.4 * _GB), "Q4_K_M"),
        Preset("mistral-7b", "Mistral 7B Instruct v0.3",
               _llama(32, 4096, 32, 8, 14336, 32768, 32768), int(4.37 * _GB), "Q4_K_M"),
        Preset("qwen2.5-7b", "Qwen2.5 7B Instruct",
               _md("qwen2", block_count=28, embedding_length=3584, attention__head_count=28,
                   attention__head_count_kv=4, feed_forward_length=18944, context_length=32768,
                   vocab_size=152064),
               int(4.68 * _GB), "Q4_K_M"),
        Preset("qwen3-8b", "Qwen3 8B",
               _md("qwen3", block_count=36, embedding_length=4096, attention__head_count=32,
                   attention__head_count_kv=8, attention__key_length=128, attention__value_length=128,
                   feed_forward_length=12288, context_length=40960, vocab_size=151936),
               int(5.03 * _GB), "Q4_K_M"),
        Preset("phi-3-mini", "Phi-3 mini 4K (no GQA)",
               _md("phi3", block_count=32, embedding_length=3072, attention__head_count=32,
                   attention__head_count_kv=32, feed_forward_length=8192, context_length=4096, vocab_size=32064,
                   attention__sliding_window=2047),
               int(2.39 * _GB), "Q4_K_M"),
        Preset("gemma-2-9b", "Gemma 2 9B (sliding window every other layer)",
               _md("gemma2", block_count=42, embedding_length=3584, attention__head_count=16,
                   attention__head_count_kv=8, attention__key_length=256, attention__value_length=256,
                   attention__sliding_window=4096, feed_forward_length=14336, context_length=8192,
                   vocab_size=256000),
               int(5.76 * _GB), "Q4_K_M"),
        Preset("gemma-3-12b", "Gemma 3 12B (5 sliding-window : 1 global)",
               _md("gemma3", block_count=48, embedding_length=3840, attention__head_count=16,
                   attention__head_count_kv=8, attention__key_length=256, attention__value_length=256,
                   attention__sliding_window=1024, feed_forward_length=15360, context_length=131072,
                   vocab_size=262208),
               int(7.30 * _GB), "Q4_K_M"),
        Preset("qwen3.5-27b", "Qwen3.5 27B (hybrid: 48 gated delta net + 16 full attention)",
               _md("qwen35", block_count=64, embedding_length=5120, attention__head_count=24,
                   attention__head_count_kv=4, attention__key_length=256, attention__value_length=256,
                   feed_forward_length=17408, context_length=262144, vocab_size=248320,
                   full_attention_interval=4, ssm__conv_kernel=4, ssm__state_size=128, ssm__group_count=16,
                   ssm__time_step_rank=48, ssm__inner_size=6144),
               int(16.5 * _GB), "Q4_K_M"),
        Preset("qwen3-30b-a3b", "Qwen3 30B-A3B (MoE, 128 experts, 8 active)",
               _md("qwen3moe", block_count=48, embedding_length=2048, attention__head_count=32,
                   attention__head_count_kv=4, attention__key_length=128, attention__value_length=128,
                   feed_forward_length=6144, expert_feed_forward_length=768, expert_count=128,
                   expert_used_count=8, context_length=40960, vocab_size=151936),
               int(18.6 * _GB), "Q4_K_M"),
        Preset("gemma-3-27b", "Gemma 3 27B (5 sliding-window : 1 global)",
               _md("gemma3", block_count=62, embedding_length=5376, attention__head_count=32,
                   attention__head_count_kv=16, attention__key_length=128, attention__value_length=128,
                   attention__sliding_window=1024, feed_forward_length=21504, context_length=131072,
                   vocab_size=262208),
               int(16.5 * _GB), "Q4_K_M"),
        Preset("gpt-oss-20b", "gpt-oss 20B (MoE, 32 experts, 4 active; 128-token window every other layer)",
               _md("gpt-oss", block_count=24, embedding_length=2880, attention__head_count=64,
                   attention__head_count_kv=8, attention__key_length=64, attention__value_length=64,
                   attention__sliding_window=128, expert_feed_forward_length=2880, feed_forward_length=2880,
                   expert_count=32, expert_used_count=4, context_length=131072, vocab_size=201088),
               int(12.1 * _GB), "MXFP4"),
        Preset("deepseek-v3", "DeepSeek V3 671B (MLA, 256 experts, 8 active)",
               _md("deepseek2", block_count=61, embedding_length=7168, attention__head_count=128,
                   attention__head_count_kv=1, attention__key_length=576, attention__value_length=512,
                   attention__key_length_mla=192, attention__value_length_mla=128, attention__kv_lora_rank=512,
                   attention__q_lora_rank=1536, rope__dimension_count=64, feed_forward_length=18432,
                   expert_feed_forward_length=2048, expert_count=256, expert_used_count=8, expert_shared_count=1,
                   leading_dense_block_count=3, context_length=163840, vocab_size=129280),
               int(404 * _GB), "Q4_K_M"),
    )
}


def preset(key: str) -> Preset:
    """Look a preset up by key; KeyError names the known keys."""
    try:
        return PRESETS[key]
    except KeyError:
        raise KeyError(f"unknown model preset {key!r}; known: {', '.join(PRESETS)}") from None
