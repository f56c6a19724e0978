"""The model's own multi-token-prediction layers as speculative decoding's drafter (``--spec-type draft-mtp``): what a
drafted token reads of them, from the GGUF's tensor list, and the shape their own context caches."""

from __future__ import annotations

import pytest
from tiny_gguf import metadata

from kvmon.core.readings import DRAFT_MODEL, MTP_LAYERS, NGRAM
from kvmon.physics.kv import kv_allocation
from kvmon.physics.layers import AttentionKind
from kvmon.physics.mtp import mtp_bytes_read
from kvmon.physics.shape import ModelShape
from kvmon.sources.llamacpp.args import parse_llama_server_args


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
