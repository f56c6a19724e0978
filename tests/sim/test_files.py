"""Files the simulator leaves for kvmon to read, written as the real ones are: a GGUF header that kvmon's own reader
reads back exactly."""

from __future__ import annotations

from pathlib import Path

from kvmon.sim.files import write_gguf_header
from kvmon.sources.gguf_meta import read_gguf_header


def test_the_gguf_header_reads_back_value_for_value(tmp_path: Path) -> None:
    metadata = {"general.architecture": "gemma3", "general.name": "Gemma 3 12B ✓", "gemma3.context_length": 131072,
                "gemma3.attention.sliding_window": 1024, "gemma3.rope.freq_base": 1000000.0,
                "gemma3.attention.head_count_kv": [8, 8, 8, 8], "tokenizer.ggml.add_bos_token": True}
    path = tmp_path / "model.gguf"
    write_gguf_header(str(path), metadata)
    header = read_gguf_header(path)
    assert header.metadata == metadata
    assert header.version == 3
    assert header.tensor_count == 0
