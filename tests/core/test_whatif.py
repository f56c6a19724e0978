"""What-if calculator (no Qt): real presets and the GPU table → KV size, ceiling and the fit verdict."""

from __future__ import annotations

from kvmon.core.whatif import GpuChoice, compute_whatif, presets

GIB = 1024**3
RTX3090 = GpuChoice("RTX 3090", 936e9, 24 * GIB, "table")


def test_llama_8b_kv_size_matches_llama_cpp_and_q8_halves_it() -> None:
    p = presets()["llama-3.1-8b"]
    f16 = compute_whatif(RTX3090, p.metadata, p.weight_bytes, 32768, "f16")
    q8 = compute_whatif(RTX3090, p.metadata, p.weight_bytes, 32768, "q8_0")
    # 32 layers × 8 KV heads × 128 × (K + V) × 2 bytes = 128 KiB per token → 4 GiB at 32K.
    assert f16.kv_allocated_bytes == 4 * GIB
    assert q8.kv_allocated_bytes == 4 * GIB * 34 // 64
    assert f16.fits and q8.fits
    assert q8.ceiling_at_ctx_tok_s > f16.ceiling_at_ctx_tok_s
    assert f16.curve[0][0] == 0 and f16.curve[-1][0] == 32768
    assert f16.curve[0][1] > f16.curve[-1][1]
    assert f16.max_context_fitting == 131072  # capped by the training context: 16 GiB of KV + weights fit
    small = GpuChoice("RTX 4060 Ti", 288e9, 16 * GIB, "table")
    f16_small = compute_whatif(small, p.metadata, p.weight_bytes, 32768, "f16")
    q8_small = compute_whatif(small, p.metadata, p.weight_bytes, 32768, "q8_0")
    assert 65536 < f16_small.max_context_fitting < q8_small.max_context_fitting


def test_70b_spills_on_one_3090() -> None:
    p = presets()["llama-3.1-70b"]
    r = compute_whatif(RTX3090, p.metadata, p.weight_bytes, 8192, "f16")
    assert r.fits is False and r.over_bytes > 0 and r.max_context_fitting == 0


def test_bad_model_metadata_gives_a_reason_not_an_exception() -> None:
    r = compute_whatif(RTX3090, {"general.architecture": "llama"}, 1, 4096, "f16")
    assert r.reason and r.curve == () and r.kv_allocated_bytes is None
