"""The model's own multi-token-prediction layers as speculative decoding's drafter (``--spec-type draft-mtp``): what a
drafted token reads of them, from the GGUF's tensor list, and the shape their own context caches."""

from __future__ import annotations

from pathlib import Path

import gguf
import pytest
from tiny_gguf import FAMILIES, N_VOCAB, make_gguf, metadata

from kvmon.core.readings import DRAFT_MODEL, MTP_LAYERS, NGRAM
from kvmon.physics.kv import kv_allocation
from kvmon.physics.mtp import mtp_bytes_read
from kvmon.physics.shape import AttentionKind, ModelShape
from kvmon.sources.gguf_meta import read_gguf_header
from kvmon.sources.llamacpp.args import parse_llama_server_args
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


def test_a_layers_own_head_is_read_and_its_embedding_table_only_looked_up() -> None:
    sizes = [("token_embd.weight", 1000), ("output.weight", 1000), ("blk.0.attn_q.weight", 50),
             ("blk.1.attn_q.weight", 60), ("blk.1.nextn.eh_proj.weight", 20), ("blk.1.nextn.embed_tokens.weight", 1000),
             ("blk.1.nextn.shared_head_head.weight", 900)]
    read = mtp_bytes_read(sizes, 2, 1)
    assert read is not None and read.bytes == 60 + 20 + 900 and read.layers == 1 and not read.estimated
    two = mtp_bytes_read([*sizes[:4], ("blk.2.attn_q.weight", 100)], 3, 2)  # one layer per drafted token: the mean
    assert two is not None and two.bytes == (60 + 1000 + 100 + 1000) / 2
    assert mtp_bytes_read(sizes[:3], 2, 1) is None  # the GGUF says nextn but carries no such tensors
    assert mtp_bytes_read(sizes, 2, 0) is None and mtp_bytes_read(sizes, 2, 2) is None


def test_the_mtp_layers_context_caches_them_as_they_are() -> None:
    shape = ModelShape.from_gguf(metadata("deepseek2-nextn"))
    mtp = shape.mtp_shape()
    assert mtp is not None and mtp.n_layers == 1 and mtp.layers[0].kind is AttentionKind.MLA
    assert kv_allocation(mtp, 2048).kv_bytes == 2048 * (64 + 32) * 2  # one latent of kv_lora + rope, f16, K only
    assert ModelShape.from_gguf(metadata("llama")).mtp_shape() is None


@pytest.mark.parametrize(("argv", "drafter"), [
    (["--spec-type", "draft-mtp"], MTP_LAYERS), (["-md", "d.gguf"], DRAFT_MODEL),
    (["--spec-type", "draft-eagle3", "-md", "e.gguf"], DRAFT_MODEL), (["--spec-type", "ngram-simple"], NGRAM),
    ([], None)])
def test_the_command_line_says_what_drafts(argv: list[str], drafter: str | None) -> None:
    assert parse_llama_server_args(["llama-server", "-m", "m.gguf", *argv]).config.drafter == drafter
