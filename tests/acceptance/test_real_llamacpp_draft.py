"""The draft context on the real llama-server (b11549, the xllamacpp wheel), a draft model's (``-md``) or the model's
own MTP layers' (``--spec-type draft-mtp``): its KV cache as kvmon sizes it against the server's own
``llama_kv_cache: size`` line for the draft, its weights and KV in the memory kvmon shows, and its reads in the
speculative ceiling."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from kvmon_in_process import _run_kvmon
from real_llama_server import RealLlamaServer, mib_matches
from tiny_gguf import make_gguf

from kvmon.sources.gguf_meta import read_gguf_header
from kvmon.sources.llamacpp.draft import mtp_weight_bytes
from kvmon.sources.llamacpp.log import parse_llama_log

pytest.importorskip("xllamacpp")

BASE = ["--metrics", "--props", "--spec-type", "draft-simple", "--spec-synth-len", "2"]
CASES = {
    "c2048-f16": ["-c", "2048", "-np", "1"],
    "np2-q8_0": ["-c", "4096", "-np", "2", "-ctkd", "q8_0", "-ctvd", "q8_0"],
    "np2-kvu-fa-off": ["-c", "4096", "-np", "2", "-kvu", "-fa", "off"],
}


def _once(url: str, *extra: str) -> dict:  # type: ignore[type-arg]
    import json

    rc, out, err = _run_kvmon("once", url, "--json", "--interval", "0", *extra)
    assert rc == 0, err
    return json.loads(out)  # type: ignore[no-any-return]


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_drafts_kv_cache_is_the_size_the_server_allocates(llama_server: Callable[..., RealLlamaServer],
                                                             tiny_gguf_dir: Path, case: str) -> None:
    """A one-layer draft beside a four-layer model: kvmon sizes the draft's KV from its GGUF and the command line
    (the model's cells and sequences, the draft's types) to the server's own size line for the draft context."""
    draft = make_gguf("llama-draft", tiny_gguf_dir)
    server = llama_server("llama", [*CASES[case], *BASE, "-md", str(draft)])
    model_line, draft_line = server.kv_lines()  # the model's context first, then the draft's
    doc = _once(server.url)
    m, d = doc["model"], doc["model"]["draft"]
    assert mib_matches(m["kv_allocated_bytes"], model_line.group(1))
    assert d["name"] == draft.name and mib_matches(d["kv_allocated_bytes"], draft_line.group(1))
    assert (d["kv_type_k"], d["kv_type_v"]) == (draft_line.group(6), draft_line.group(8))
    assert int(draft_line.group(3)) == 1 and doc["provenance"]["draft_kv_allocated_bytes"] == "computed"
    # a CPU server: the model, its KV and the draft all live in host RAM, the draft's part its weights and KV
    assert doc["host"]["draft_in_host_bytes"] == d["weight_bytes"] + d["kv_allocated_bytes"]
    assert d["weight_bytes"] == read_gguf_header(draft).tensor_bytes  # its tensors, as its GGUF lists them
    # with the server's log, the sizes are the log's own, and the model's cache types stay the model's
    logged = _once(server.url, "--log", str(server.log_path))
    assert logged["provenance"]["draft_kv_allocated_bytes"] == "log"
    assert mib_matches(logged["model"]["draft"]["kv_allocated_bytes"], draft_line.group(1))
    assert mib_matches(logged["model"]["kv_allocated_bytes"], model_line.group(1))
    assert (logged["model"]["kv_type_k"], logged["model"]["kv_type_v"]) == (model_line.group(6), model_line.group(8))
    cfg = parse_llama_log(server.log_lines())
    assert cfg.model_path is not None and cfg.model_path.endswith("tiny-llama.gguf")


def test_the_drafts_kv_reads_lower_the_speculative_ceiling(llama_server: Callable[..., RealLlamaServer],
                                                          tiny_gguf_dir: Path) -> None:
    """Deep in a long reply each drafted token reads the draft's KV cache too: the ceiling with those reads is the
    formula's from the server's own counters, below the one that counts the draft's weights alone, and above the
    measured speed."""
    draft = make_gguf("llama-draft", tiny_gguf_dir)
    server = llama_server("llama", ["-c", "4096", "-np", "1", *BASE, "-md", str(draft)])
    reply = httpx.post(f"{server.url}/completion", json={"prompt": "hello world " * 250, "n_predict": 400,
                                                        "ignore_eos": True}, timeout=120).json()
    t = reply["timings"]
    doc = _once(server.url)
    spec, d = doc["speculative"], doc["model"]["draft"]
    assert spec["draft_tokens"] == t["draft_n"] and spec["accepted_tokens"] == t["draft_n_accepted"]
    depth = doc["context_tokens"]
    assert depth == t["prompt_n"] + t["predicted_n"] - 1 or depth == t["prompt_n"] + t["predicted_n"]
    kv_read = d["kv_bytes_per_token"] * depth
    assert spec["draft_bytes_per_token"] == d["weight_bytes"] + kv_read
    one, k, drafted = spec["one_token_ceiling_tok_s"], spec["tokens_per_step"], spec["drafted_per_step"]
    target = doc["bytes_read_per_token"]
    with_kv = k / (1 / one + drafted * (d["weight_bytes"] + kv_read) / target / one)
    weights_only = k / (1 / one + drafted * d["weight_bytes"] / target / one)
    assert math.isclose(doc["ceiling_tok_s"], with_kv, rel_tol=1e-6)
    assert doc["ceiling_tok_s"] < weights_only * (1 - 0.05)  # ~3,400 deep the draft's KV outweighs its weights
    assert t["predicted_per_second"] <= doc["ceiling_tok_s"]


def test_the_models_own_mtp_layers_draft_with_their_own_kv_cache(llama_server: Callable[..., RealLlamaServer],
                                                                  tiny_gguf_dir: Path) -> None:
    """--spec-type draft-mtp on a model with one MTP layer (nextn_predict_layers = 1): llama-server gives that layer
    a context of its own; kvmon sizes its KV to the server's own line, counts no second copy of its weights (they
    are the model's), and puts one MTP layer's read per drafted token in the ceiling."""
    server = llama_server("deepseek2-nextn", ["-c", "2048", "-np", "1", "--metrics", "--props", "--spec-type",
                                              "draft-mtp", "--spec-synth-len", "2"])
    model_line, mtp_line = server.kv_lines()
    assert int(model_line.group(3)) == 3 and int(mtp_line.group(3)) == 1  # the trunk's 3 layers; the MTP layer
    reply = httpx.post(f"{server.url}/completion", json={"prompt": "hello world", "n_predict": 96,
                                                        "ignore_eos": True}, timeout=120).json()
    assert reply["timings"]["draft_n"] > 0
    doc = _once(server.url)
    m, d, spec = doc["model"], doc["model"]["draft"], doc["speculative"]
    assert mib_matches(m["kv_allocated_bytes"], model_line.group(1))
    assert d["name"] == "the model's MTP layers" and mib_matches(d["kv_allocated_bytes"], mtp_line.group(1))
    assert d["weight_bytes"] is None and doc["host"]["draft_in_host_bytes"] == d["kv_allocated_bytes"]
    want = mtp_weight_bytes(read_gguf_header(server.model))
    assert want and spec["draft_weight_bytes"] == want < m["weight_bytes"] / 2
    depth = doc["context_tokens"]
    assert spec["draft_bytes_per_token"] == want + d["kv_bytes_per_token"] * depth
    one, k, drafted = spec["one_token_ceiling_tok_s"], spec["tokens_per_step"], spec["drafted_per_step"]
    assert math.isclose(doc["ceiling_tok_s"], k / (1 / one + drafted * spec["draft_bytes_per_token"]
                                                   / doc["bytes_read_per_token"] / one), rel_tol=1e-6)
    assert "the model's MTP layers" in doc["reasons"]["ceiling.speculative"]
