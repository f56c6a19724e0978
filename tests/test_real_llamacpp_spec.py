"""Speculative decoding on the real llama-server (b11549, the xllamacpp wheel): a tiny draft model (the target's own
file) with llama.cpp's synthetic acceptance, read by ``kvmon once --json`` against the server's own counters."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from real_llama_server import RealLlamaServer, TimedReply
from test_real_llamacpp_api import FLAGS, _run_kvmon
from tiny_gguf import make_gguf

from kvmon.sources.llamacpp.parse import parse_metrics

pytest.importorskip("xllamacpp")


def _speculating(llama_server: Callable[..., RealLlamaServer], tiny_gguf_dir: Path, synth: str,
                 *more: str) -> RealLlamaServer:
    draft = make_gguf("llama", tiny_gguf_dir)  # the target's own file as its draft
    return llama_server("llama", [*FLAGS, "--spec-type", "draft-simple", "-md", str(draft),
                                  "--spec-synth-len", synth, *more])


def test_acceptance_is_the_servers_own_and_lifts_the_ceiling(llama_server: Callable[..., RealLlamaServer],
                                                             tiny_gguf_dir: Path) -> None:
    server = _speculating(llama_server, tiny_gguf_dir, "2")
    reply = httpx.post(f"{server.url}/completion", json={"prompt": "hello world", "n_predict": 96,
                                                        "ignore_eos": True}, timeout=120).json()
    t = reply["timings"]
    assert t["draft_n"] > 0 and t["draft_n_accepted"] > 0  # the server did speculate
    page = httpx.get(f"{server.url}/metrics", timeout=5).text
    counters = parse_metrics(page)
    per_pos_line = re.compile(r"^llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
                              r'\{position="(\d+)"\} (\S+)$', re.M)
    per_pos = [int(float(v)) for _p, v in sorted((int(p), v) for p, v in per_pos_line.findall(page))]
    rc, out, err = _run_kvmon("once", server.url, "--json", "--interval", "0")
    assert rc == 0, err
    doc = json.loads(out)
    spec = doc["speculative"]
    assert spec is not None
    assert spec["drafts"] == counters["spec_decode_num_drafts_total"]
    assert spec["draft_tokens"] == counters["spec_decode_num_draft_tokens_total"] == t["draft_n"]
    assert spec["accepted_tokens"] == counters["spec_decode_num_accepted_tokens_total"] == t["draft_n_accepted"]
    # acceptance at each draft position: the server's own counts (3 positions: --spec-draft-n-max 3 by default),
    # each a share of the drafts
    assert len(per_pos) == 3 and spec["accepted_by_position"] == per_pos and sum(per_pos) == spec["accepted_tokens"]
    assert spec["acceptance_by_position"] == [n / spec["drafts"] for n in per_pos]
    generated = counters["tokens_predicted_total"]
    assert spec["generated_tokens"] == generated == t["predicted_n"] == 96
    per_step = generated / (generated - spec["accepted_tokens"])
    assert math.isclose(spec["tokens_per_step"], per_step) and 1.5 < per_step < 2.5  # synthetic length 2
    assert math.isclose(spec["acceptance_rate"], spec["accepted_tokens"] / spec["draft_tokens"])
    one = spec["one_token_ceiling_tok_s"]
    # the draft is the target's own file: each drafted token reads its weights again, so with ~2 drafted tokens
    # per step a step takes ~3 one-token reads and yields ~2 tokens (speculation with an equal draft is a loss)
    steps = generated - spec["accepted_tokens"]
    drafted = spec["draft_tokens"] / steps
    assert math.isclose(spec["drafted_per_step"], drafted)
    draft = spec["draft_weight_bytes"]
    assert draft == doc["model"]["weight_bytes"] == doc["model"]["draft"]["weight_bytes"]  # the -md file's tensors
    # each drafted token reads the draft's weights and its KV cache at this depth (a llama: every position)
    depth = doc["context_tokens"]
    assert depth and spec["draft_bytes_per_token"] == draft + doc["model"]["draft"]["kv_bytes_per_token"] * depth
    target = doc["bytes_read_per_token"]
    want = per_step / (1 / one + drafted * spec["draft_bytes_per_token"] / target / one)
    assert one and math.isclose(doc["ceiling_tok_s"], want, rel_tol=1e-6)
    assert doc["ceiling_tok_s"] < one  # reading the draft costs more than its accepted tokens bring
    assert "of its KV cache at this depth" in doc["reasons"]["ceiling.speculative"]
    assert doc["forecast"]["milestones"] == []  # a one-token forecast is never drawn beside a speculative ceiling


def test_the_speculative_ceiling_bounds_the_measured_speed(llama_server: Callable[..., RealLlamaServer],
                                                          tiny_gguf_dir: Path) -> None:
    server = _speculating(llama_server, tiny_gguf_dir, "3", "-c", "16384")  # a reply that outlasts `once`
    httpx.post(f"{server.url}/completion", json={"prompt": "hi", "n_predict": 32, "ignore_eos": True}, timeout=120)
    with TimedReply(server.url, {"prompt": "hello world", "n_predict": 16000, "ignore_eos": True}) as reply:
        reply.wait_tokens(50)
        rc, out, err = _run_kvmon("once", server.url, "--json", "--interval", "0.5")
        assert not reply.done.is_set(), "the reply ended while kvmon read it"
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["decode_tok_s"] is not None and doc["speculative"] is not None
    assert doc["decode_tok_s"] <= doc["ceiling_tok_s"] and not doc["ceiling_uncertain"]
    assert 0 < doc["efficiency"] <= 1
    assert doc["forecast"]["milestones"] == []


def test_a_server_that_does_not_speculate_says_nothing_of_it(llama_server: Callable[..., RealLlamaServer]) -> None:
    server = llama_server("llama", FLAGS)
    httpx.post(f"{server.url}/completion", json={"prompt": "hi", "n_predict": 16, "ignore_eos": True}, timeout=120)
    rc, out, err = _run_kvmon("once", server.url, "--json", "--interval", "0")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["speculative"] is None and "ceiling.speculative" not in doc["reasons"]
