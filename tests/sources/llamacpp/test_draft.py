"""A model's own MTP layers as a draft: the bytes a drafted token reads, from the GGUF."""

from __future__ import annotations

from pathlib import Path

import gguf
from tiny_gguf import FAMILIES, N_VOCAB, make_gguf

from kvmon.sources.gguf_meta import read_gguf_header
from kvmon.sources.llamacpp.draft import mtp_weight_bytes


def _f32_bytes(ne: tuple[int, ...]) -> int:
    n = 4
    for d in ne:
        n *= d
    return n


def test_a_drafted_token_reads_one_mtp_layer_its_used_experts_and_the_output_head(tiny_gguf_dir: Path) -> None:
    """The tiny GLM-4.7-Flash-like model: 3 trunk layers and one MTP block with routed experts (2 of 4 used) and no
    head of its own, so the tied token embedding is the head its drafted token is picked with."""
    family = FAMILIES["deepseek2-nextn"]
    header = read_gguf_header(make_gguf("deepseek2-nextn", tiny_gguf_dir))
    block = {n: _f32_bytes(ne) for n, ne in family.tensors().items() if n.startswith("blk.3.")}
    want = sum(b / 2 if "_exps." in n else b for n, b in block.items()) + _f32_bytes((128, N_VOCAB))
    assert mtp_weight_bytes(header) == round(want)
    # the key read is the gguf package's own spelling of llama.cpp's LLM_KV_NEXTN_PREDICT_LAYERS
    assert gguf.Keys.LLM.NEXTN_PREDICT_LAYERS.format(arch="deepseek2") in header.metadata
    assert mtp_weight_bytes(read_gguf_header(make_gguf("llama", tiny_gguf_dir))) is None  # no MTP layers
