"""A small, valid GGUF file written from a dict of metadata, for the readers of model files."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np


def write_small_gguf(path: Path, *, vocab: int = 20000, tensor_shape: tuple[int, int] = (64, 32)) -> None:
    """A tiny llama-shaped GGUF with a big tokenizer vocabulary (which the reader must skip)."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny test model")
    w.add_block_count(4)
    w.add_context_length(32768)
    w.add_embedding_length(256)
    w.add_feed_forward_length(512)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_key_length(64)
    w.add_value_length(64)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_array("llama.attention.sliding_window_pattern", [True, False, True, False])
    w.add_token_list([f"tok{i}" for i in range(vocab)])
    w.add_token_scores([0.0] * vocab)
    w.add_tensor("token_embd.weight", np.zeros(tensor_shape, dtype=np.float16))
    w.add_tensor("output_norm.weight", np.zeros((tensor_shape[1],), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
