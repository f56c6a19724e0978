"""What attention costs per position beyond reading its KV bytes, before a session has measured it: a prior.

A decode step at depth n takes ``t(n) = a + b · x(n)`` (``kvmon.physics.decode_model``): x(n) the seconds the KV
read would take at peak bandwidth, b ≥ 1 how many seconds it really costs per such second (the read at the
bandwidth actually reached, plus the attention compute that grows with depth). With few measured depths, or depths
where the KV is a small share of the step (a hybrid model, where one layer in four keeps a cache), the data cannot
fix b; this prior does, per kind of attention:

- ``gqa``: full attention with fewer KV heads than query heads (most current dense and MoE models);
- ``mha``: full attention with a KV head per query head (no in-sample sweep: the ``gqa`` prior stands in);
- ``sliding_window``: some layers attend to a window only (gpt-oss, gemma-3);
- ``mla``: DeepSeek-style latent attention (one wide latent "KV head" shared by every query head);
- ``hybrid_recurrent``: recurrent layers (gated delta-net, Mamba) between attention layers;
- ``cpu``: any of them whose attention runs on the CPU (KV in host RAM), where compute, not the bus, dominates.

The numbers are estimated from the in-sample published sweeps of ``bench/data/depth_sweeps.json`` (``"set":
"in_sample"``) by ``bench/attention_prior.py``, which prints how: every sweep with a model shape and a bandwidth,
except those whose kernels change with depth (Metal, see ``KERNEL_SWITCHES``), is fitted on all its points
with ``decode_model.free_slope`` (relative least squares, t = a + b·x, a and b free); per class, the prior on log b
is the mean of those fitted log b, and its spread their standard deviation shrunk toward the spread of all the
in-sample sweeps about their own class means (``POOLED_LOG_SD``), as if each class had seen ``PSEUDO_SWEEPS`` more
sweeps spread like that: a class of three or four sweeps that happen to agree (the four GQA sweeps, b = 1.31–1.51,
all with flash attention on) does not claim to know more than that. No spread is under ``MIN_LOG_SD`` (two builds
of one engine on one card differ by about that: the RTX 4080 sweeps of Llama-3.1-8B under CUDA and Vulkan, b = 1.31
and 1.51).

Two more numbers come from the same sweeps. ``DRIFT_PER_DOUBLING``: slopes change with depth, so past the deepest
measured depth log b drifts by this standard deviation per doubling of the KV read; it is the root-mean-square of
log(b of a sweep's second half ÷ b of its first half) per doubling between the halves' mean KV reads
(``drift_per_doubling``). ``FIT_SPREAD_FLOOR``: the least relative spread a fit assumes of its depth bins, the mean
spread of the sweeps' points about their own free line (``spread_floor``).
``tests/physics/test_attention_prior.py`` checks that these constants are what the sweeps give.
The held-out sweeps (``"set": "held_out"``) are never used here: the accuracy bench scores the forecast on them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kvmon.physics.layers import AttentionKind
from kvmon.physics.shape import ModelShape

CLASSES = ("gqa", "mha", "sliding_window", "mla", "hybrid_recurrent", "cpu")
MLA_ARCHES = frozenset({"deepseek2"})  # GGUFs of DeepSeek-style latent attention, also before llama.cpp cached MLA
MIN_LOG_SD = 0.15
PSEUDO_SWEEPS = 2.0
STAND_IN = {"mha": "gqa"}  # a class without in-sample sweeps borrows another's centre (and the pooled spread)

# Where the same hardware's attention kernels change with depth, so a slope measured at shallow depths does not
# extend: Metal's flash-attention vector kernel (Apple GPUs) is tuned per KV length. Published: llama.cpp PR 26570
# (M2 Ultra, Qwen3-0.6B: tg32 falls 240 → 144 tok/s from 0 to 8K, then 102 and 65 at 16K and 32K, far off the line
# through 0–8K) and PR 13583 (Llama-3.2-1B: 211 tok/s at 1K, 115 at 8K before the head-size-64 vector kernel).
@dataclass(frozen=True)
class KernelSwitch:
    """Attention kernels that change with depth: on which backend, and past which depth."""

    backend: str
    tokens: int

    @property
    def note(self) -> str:
        """What the forecast says instead of extrapolating past the switch."""
        return (f"kernel-dependent beyond {self.tokens // 1024}K: {self.backend}'s attention kernels change with "
                f"depth, so the slope measured so far does not carry past it; this session's own points past "
                f"{self.tokens // 1024}K will replace the estimate")


KERNEL_SWITCHES: dict[str, KernelSwitch] = {"apple": KernelSwitch("Metal", 8192)}  # by device vendor



@dataclass(frozen=True)
class AttentionPrior:
    """log b ~ Normal(log_b_mean, log_b_sd) for one class, and the in-sample sweeps it was estimated from."""

    attention_class: str
    log_b_mean: float
    log_b_sd: float
    sweeps: tuple[str, ...] = ()

    @property
    def b_median(self) -> float:
        """The prior's median slope (seconds per second of KV read at peak bandwidth)."""
        return math.exp(self.log_b_mean)


def attention_class(shape: ModelShape, attention_on_host: bool = False) -> str:
    """The class of ``shape``'s attention (``CLASSES``); ``attention_on_host``: its KV is read by the CPU."""
    if attention_on_host:
        return "cpu"
    kv_layers = [layer for layer in shape.layers if layer.has_kv]
    if any(layer.recurrent_elements > 0 or layer.kind is AttentionKind.RECURRENT for layer in shape.layers) \
            and kv_layers:
        return "hybrid_recurrent"
    if shape.arch in MLA_ARCHES or any(layer.kind is AttentionKind.MLA for layer in kv_layers):
        return "mla"
    if any(layer.kind in (AttentionKind.SWA, AttentionKind.CHUNKED) for layer in kv_layers):
        return "sliding_window"
    if kv_layers and all(layer.n_head_kv >= shape.n_head for layer in kv_layers):
        return "mha"
    return "gqa"


def kernel_switch(vendors: Iterable[str | None]) -> KernelSwitch | None:
    """The earliest kernel switch among devices of these vendors, else None."""
    found = [KERNEL_SWITCHES[v] for v in vendors if v in KERNEL_SWITCHES]
    return min(found, key=lambda k: k.tokens) if found else None


def estimate(samples: Mapping[str, Sequence[tuple[str, float]]]) -> dict[str, AttentionPrior]:
    """Per class, the prior on log b from (sweep id, fitted b) samples, by the rule in the module docstring."""
    logs = {c: [(sid, math.log(b)) for sid, b in rows if b > 0 and math.isfinite(b)] for c, rows in samples.items()}
    means = {c: sum(v for _s, v in rows) / len(rows) for c, rows in logs.items() if rows}
    dev = [v - means[c] for c, rows in logs.items() for _s, v in rows]
    pooled = math.sqrt(sum(d * d for d in dev) / max(1, len(dev) - len(means))) if dev else MIN_LOG_SD
    out: dict[str, AttentionPrior] = {}
    for c, rows in logs.items():
        if not rows:
            continue
        ss = sum((v - means[c]) ** 2 for _s, v in rows)  # (n − 1) × the class's own variance
        sd = math.sqrt((PSEUDO_SWEEPS * pooled**2 + ss) / (PSEUDO_SWEEPS + len(rows) - 1))
        out[c] = AttentionPrior(c, means[c], max(sd, MIN_LOG_SD), tuple(sid for sid, _v in rows))
    for c, src in STAND_IN.items():
        if c not in out and src in out:
            out[c] = AttentionPrior(c, out[src].log_b_mean, max(out[src].log_b_sd, pooled), out[src].sweeps)
    return out


def drift_per_doubling(pairs: Sequence[tuple[float, float]]) -> float:
    """From (log(b₂ ÷ b₁), doublings between the halves) of each sweep: √(Σ log² ÷ Σ doublings²)."""
    den = sum(d * d for _r, d in pairs)
    return math.sqrt(sum(r * r for r, _d in pairs) / den) if den > 0 else 0.0


def spread_floor(spreads: Sequence[float]) -> float:
    """From each sweep's relative spread about its own free line: their mean."""
    return sum(spreads) / len(spreads) if spreads else 0.0


# Estimated by bench/attention_prior.py from the in-sample sweeps (see the module docstring); b = exp(mean).
PRIORS: dict[str, AttentionPrior] = {p.attention_class: p for p in (
    AttentionPrior("gqa", 0.3340, 0.3790, (
        "dgx_spark_qwen3-coder-30b-a3b_q8_0",
        "dgx_spark_qwen2.5-coder-7b_q8_0",
        "ik562_llama-3.1-8b_q4_0_rtx4080_vulkan_mainline",
        "ik562_llama-3.1-8b_q4_0_rtx4080_cuda",
    )),
    AttentionPrior("mha", 0.3340, 0.5946, (
        "dgx_spark_qwen3-coder-30b-a3b_q8_0",
        "dgx_spark_qwen2.5-coder-7b_q8_0",
        "ik562_llama-3.1-8b_q4_0_rtx4080_vulkan_mainline",
        "ik562_llama-3.1-8b_q4_0_rtx4080_cuda",
    )),
    AttentionPrior("sliding_window", 0.4658, 0.3776, (
        "dgx_spark_gpt-oss-20b_mxfp4",
        "dgx_spark_gpt-oss-120b_mxfp4",
        "dgx_spark_gemma-3-4b-it-qat_q4_0",
        "strixhalo_gpt-oss-120b_ud-q8_k_xl_rocm",
    )),
    AttentionPrior("mla", 2.0572, 1.0367, (
        "ik354_deepseek-lite_q4_0_rtx4080_cuda_mainline",
        "ik386_deepseek-lite_q4_0_rtx4080_cuda_ik_flashmla3",
        "jiegec_glm-4.7-flash_ud-q4_k_xl_rtx4090_cuda",
    )),
    AttentionPrior("hybrid_recurrent", 0.6752, 0.4964, (
        "strixhalo_qwen3-coder-next_ud-q4_k_xl_rocm",
        "strixhalo_qwen3.5-122b-a10b_ud-q4_k_xl_rocm",
        "seed_dual-rtx3090_qwen3.8-27b_q4_k_m_q8kv",
    )),
    AttentionPrior("cpu", 1.0347, 0.4859, (
        "ik354_deepseek-lite_q4_0_ryzen7950x_cpu_mainline_nofa",
        "ik357_qwen3-30b-a3b_iq4xs-mix_ryzen7950x_cpu_mainline_nofa",
    )),
)}
POOLED_LOG_SD = 0.5946
DRIFT_PER_DOUBLING = 0.1095
FIT_SPREAD_FLOOR = 0.0150


def prior_for(attention_class_name: str) -> AttentionPrior:
    """The prior for a class; an unknown class gets the widest in-sample prior centred on ``gqa``'s."""
    found = PRIORS.get(attention_class_name)
    if found is not None:
        return found
    base = PRIORS.get("gqa")
    widest = max((p.log_b_sd for p in PRIORS.values()), default=1.0)
    return AttentionPrior(attention_class_name, base.log_b_mean if base else 0.4, widest)
