"""kvmon's KV and recurrent-state allocation against llama.cpp b11549's own log, family by family, flag by flag.

Each case starts the real server (``real_llama_server.py``) on a tiny GGUF (``tiny_gguf.py``) with one
llama-server command line, then checks that
- the physics API (``kv_allocation`` on the GGUF's shape, with the settings the command-line reader found)
  gives each ``llama_kv_cache: size`` line (cells, layers, K and V MiB) and the ``llama_memory_recurrent`` line;
- ``kvmon once --json`` against the running server, reading its command line from the process, reports the
  same KV and recurrent bytes, and so does ``once --json --log`` with the server's log;
- the command-line reader and the log reader agree on every flag that changes the allocation.

Every family here loads in the embedded server; none is left out. Settings without a ``CommonParams`` field
in this wheel: none of the allocation flags (``-c -np -kvu -ctk -ctv -fa -b -ub --swa-full`` all have one).
One combination does not load in llama.cpp itself (MLA with a K type different from V's): that case checks
the server's refusal instead.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from real_llama_server import KVMON_TIMEOUT_S, MIB, RealLlamaServer, ServerFailed, mib_matches
from tiny_gguf import FAMILIES

from kvmon.cli import main as kvmon_main
from kvmon.core.readings import ServerConfig
from kvmon.physics.kv import DEFAULT_N_BATCH, DEFAULT_N_UBATCH, KvAllocation, kv_allocation, pad_cells
from kvmon.physics.shape import ModelShape
from kvmon.sources.gguf_meta import read_gguf_metadata
from kvmon.sources.llamacpp.args import parse_llama_server_args
from kvmon.sources.llamacpp.log import parse_llama_log

AUTO_PARALLEL = 4  # llama-server's -np auto

C = ["-c", "4096", "-np", "1"]
SETTINGS: dict[str, list[str]] = {
    "c4096": C,
    "no-c-np-auto": [],  # the training context, 4 unified slots
    "c0": ["-c", "0", "-np", "1"],
    "np2": ["-c", "4096", "-np", "2"],
    "np2-kvu": ["-c", "4096", "-np", "2", "-kvu"],
    "np-auto": ["-c", "4096"],
    "q8_0": [*C, "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on"],
    "q4_0": [*C, "-ctk", "q4_0", "-ctv", "q4_0", "-fa", "on"],
    "k-q8_0-fa-off": [*C, "-ctk", "q8_0", "-fa", "off"],
    "fa-on": [*C, "-fa", "on"],
    "fa-off": [*C, "-fa", "off"],
    "ub128": [*C, "-ub", "128"],
    "b256": [*C, "-b", "256"],
    "c640-b-over-c": ["-c", "640", "-np", "1"],  # n_batch (2048) capped at n_ctx, so n_ubatch 512
    "swa-full": [*C, "--swa-full"],
}


def _shape(server: RealLlamaServer) -> ModelShape:
    return ModelShape.from_gguf(read_gguf_metadata(server.model))


def _expected(shape: ModelShape, cfg: ServerConfig) -> tuple[KvAllocation, int]:
    """kvmon's allocation for the settings as read from the command line (defaults resolved as llama-server does)."""
    n_ctx = cfg.n_ctx_total or shape.n_ctx_train or 0
    n_seq = cfg.n_parallel or AUTO_PARALLEL
    alloc = kv_allocation(shape, n_ctx, n_seq=n_seq, unified=bool(cfg.kv_unified), type_k=cfg.type_k,
                          type_v=cfg.type_v, n_ubatch=cfg.n_ubatch or DEFAULT_N_UBATCH,
                          n_batch=cfg.n_batch or DEFAULT_N_BATCH,
                          swa_full=bool(cfg.swa_full), flash_attn=cfg.flash_attn != "off")
    return alloc, n_seq


def _once(*argv: str) -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = kvmon_main(["once", *argv, "--json", "--interval", "0", "--timeout", f"{KVMON_TIMEOUT_S:g}"])
    assert rc == 0, out.getvalue()
    return json.loads(out.getvalue())  # type: ignore[no-any-return]


def _check_kv_lines(server: RealLlamaServer, shape: ModelShape, alloc: KvAllocation) -> None:
    """Each KV size line (the full-attention cache, then the sliding-window one) against kvmon's numbers."""
    lines = server.kv_lines()
    n_swa = sum(1 for ly in shape.layers if ly.has_kv and ly.kind.value in ("swa", "chunked"))
    n_full = alloc.n_kv_layers - n_swa
    expected = []
    if n_full:
        expected.append((alloc.cells, n_full, alloc.k_bytes - alloc.swa_k_bytes, alloc.v_bytes - alloc.swa_v_bytes))
    if n_swa:
        expected.append((alloc.swa_cells, n_swa, alloc.swa_k_bytes, alloc.swa_v_bytes))
    printed = [m.group(0) for m in lines]
    assert len(lines) == len(expected), f"log: {printed}, kvmon: {expected}"
    for (cells, layers, k, v), m in zip(expected, lines, strict=True):
        assert (cells, layers) == (int(m.group(2)), int(m.group(3))), f"kvmon {expected} vs log {printed}"
        assert mib_matches(k, m.group(7)) and mib_matches(v, m.group(9)), \
            f"kvmon K {k / MIB:.3f} V {v / MIB:.3f} MiB vs log {m.group(0)}"


def _agree(cmd: ServerConfig, log: ServerConfig, shape: ModelShape) -> None:
    """The command-line reader and the log reader on every setting that changes the allocation."""
    if shape.n_kv_layers:  # a model without attention prints no KV line, so no cache types
        assert (cmd.type_k, cmd.type_v) == (log.type_k, log.type_v)
    else:
        assert (log.type_k, log.type_v) == (None, None)
    assert cmd.kv_unified == log.kv_unified
    assert (cmd.n_parallel or AUTO_PARALLEL) == log.n_parallel
    n_ctx = cmd.n_ctx_total or shape.n_ctx_train or 0
    per_seq = pad_cells(pad_cells(n_ctx) // (1 if cmd.kv_unified else log.n_parallel or 1))
    assert log.n_ctx_total == (per_seq if cmd.kv_unified else per_seq * (log.n_parallel or 1))
    assert (cmd.n_batch, cmd.n_ubatch) == (log.n_batch, log.n_ubatch)
    if cmd.flash_attn == "off":
        assert log.flash_attn == "off"
    else:  # auto resolves at load: on for this CPU build; the cache is laid out for FA either way
        assert log.flash_attn == "on"
    if any(ly.kind.value == "swa" for ly in shape.layers):  # the log says it only for models with SWA layers
        assert cmd.swa_full == log.swa_full


CASES = [(f, s) for f in FAMILIES for s in SETTINGS]
# combinations llama.cpp itself refuses to load: the test checks that it does, with this message
REFUSED = {
    ("deepseek2", "k-q8_0-fa-off"): "model does not support different K (q8_0) and V (f16) cache types",
    ("deepseek2-nextn", "k-q8_0-fa-off"): "model does not support different K (q8_0) and V (f16) cache types",
}


@pytest.mark.parametrize(("family", "setting"), CASES, ids=[f"{f}-{s}" for f, s in CASES])
def test_allocation_matches_the_real_server(family: str, setting: str,
                                            llama_server: Callable[..., RealLlamaServer]) -> None:
    if (family, setting) in REFUSED:  # MLA keeps one latent in K: V cannot have a type of its own
        with pytest.raises(ServerFailed, match=re.escape(REFUSED[family, setting])):
            llama_server(family, SETTINGS[setting])
        return
    server = llama_server(family, SETTINGS[setting])
    shape = _shape(server)
    cmd = parse_llama_server_args(server.argv[1:]).config
    log = parse_llama_log(server.log_lines())
    _agree(cmd, log, shape)

    # the physics API, line by line
    alloc, n_seq = _expected(shape, cmd)
    _check_kv_lines(server, shape, alloc)
    rs = server.recurrent_lines()
    if shape.n_recurrent_layers:
        assert len(rs) == 1 and mib_matches(alloc.recurrent_bytes, rs[0].group(1)), (alloc.recurrent_bytes, rs)
        assert int(rs[0].group(4)) == n_seq
    else:
        assert rs == [] and alloc.recurrent_bytes == 0
    kv_total_mib = sum(float(m.group(1)) for m in server.kv_lines())
    tolerance = (0.005 * max(1, len(server.kv_lines())) + 1e-9) * MIB

    # kvmon once --json: from the process's command line alone, then with the log too
    for argv in ((server.url,), (server.url, "--log", str(server.log_path))):
        doc = _once(*argv)
        m, prov = doc["model"], doc["provenance"]
        with_log = "--log" in argv
        assert prov["kv_allocated_bytes"] == ("log" if with_log and alloc.n_kv_layers else "computed")
        if not with_log:  # the settings came from the server process's own command line
            assert prov["kv_type"] == ("command_line" if "-ctk" in SETTINGS[setting] else "default")
            assert prov.get("n_ctx_total") == ("command_line" if cmd.n_ctx_total else "computed")
        assert m["arch"] == FAMILIES[family].arch
        assert (m["kv_type_k"], m["kv_type_v"]) == (cmd.type_k, cmd.type_v)
        assert m["kv_unified"] == cmd.kv_unified
        assert m["n_slots"] == n_seq
        assert abs(m["kv_allocated_bytes"] - kv_total_mib * MIB) <= tolerance, (argv, m, kv_total_mib)
        if shape.n_recurrent_layers:
            assert mib_matches(m["recurrent_state_bytes"], rs[0].group(1)), (argv, m["recurrent_state_bytes"], rs)
            assert prov["recurrent_state_bytes"] == ("log" if with_log else "computed")
        else:
            assert m["recurrent_state_bytes"] is None
