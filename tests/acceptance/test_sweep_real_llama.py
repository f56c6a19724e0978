"""The depth sweep against the real llama.cpp b11549 server (xllamacpp, a tiny model trained for 32K, one thread):
its table's decode rates are the server's own timings of each request (read back from the server's log), the
prompt cache carries each step so the server reads little more than the depth reached, a cancel mid-step leaves the
slot idle within a second, and a sweep past n_ctx is refused with the reason."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import threading
import time
from collections.abc import Callable

import httpx
import pytest
from real_llama_server import RealLlamaServer

from kvmon.app.build import open_monitor
from kvmon.app.sweep import DepthSweep, Progress, target_for
from kvmon.cli import main as kvmon_main
from kvmon.core.sweep import plan_sweep
from kvmon.sources.backends import by_name

GENERATE = 64
# slot print_timing: id  0 | task 79 |        eval time =      29.33 ms /    64 tokens (...,  2147.97 tokens per second)
EVAL = re.compile(r"\|\s+eval time =\s+([0-9.]+) ms /\s+(\d+) tokens \(.*?([0-9.]+) tokens per second\)")
PROMPT = re.compile(r"prompt eval time =\s+([0-9.]+) ms /\s+(\d+) tokens")


def _server(llama_server: Callable[..., RealLlamaServer], ctx: int = 16384) -> RealLlamaServer:
    return llama_server("llama-long", ["-c", str(ctx), "-np", "1", "--metrics"])


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = kvmon_main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def _log_rates(server: RealLlamaServer, n: int) -> list[float]:
    """The server's own decode rate of every request that generated ``n`` tokens, in order."""
    return [float(m.group(3)) for m in map(EVAL.search, server.log_lines()) if m and int(m.group(2)) == n]


def _log_prompt_tokens(server: RealLlamaServer) -> int:
    return sum(int(m.group(2)) for m in map(PROMPT.search, server.log_lines()) if m)


def test_a_sweep_to_8k_is_the_servers_own_timings_and_reads_the_prompt_once(
        llama_server: Callable[..., RealLlamaServer], tmp_path: object) -> None:
    server = _server(llama_server)
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    rc, out, err = _run("sweep", server.url, "--to", "8192", "--json", "--csv", f"{tmp_path}/sweep.csv", "-o",
                        f"{tmp_path}/sweep.png")
    wall = time.monotonic() - t0
    assert rc == 0, err
    doc = json.loads(out)
    rows = doc["rows"]
    assert [r["depth_tokens"] for r in rows] == [1, 1024, 2048, 3072, 4096, 5120, 6144, 7168, 8192]
    assert wall <= 60.0, f"the sweep took {wall:.1f} s (load average {load:.1f})"
    # each depth's decode rate is what the server timed for that very request (its log says so, in order)
    own = _log_rates(server, GENERATE)
    assert len(own) == len(rows)
    for row, server_rate in zip(rows, own, strict=True):
        assert row["decode_tok_s"] == pytest.approx(server_rate, rel=0.05), row
        assert row["generated"] == GENERATE and row["timing"] == "server"
    # the prompt cache: the server read the conversation about once, not once per depth
    read = _log_prompt_tokens(server)
    assert doc["prompt_tokens_read"] == read
    assert doc["depth_reached"] == 8192 and read <= 1.2 * 8192
    metrics = httpx.get(f"{server.url}/metrics", timeout=5).text
    total = float(re.search(r"^llamacpp:prompt_tokens_total (\S+)", metrics, re.M).group(1))  # type: ignore[union-attr]
    assert total == read
    # the ceiling and efficiency columns are filled (CPU-only: host RAM's measured bandwidth)
    assert all(r["ceiling_tok_s"] and 0 < r["efficiency"] < 1 for r in rows)
    csv = (tmp_path / "sweep.csv").read_text().splitlines()  # type: ignore[operator]
    assert csv[0].startswith("depth_tokens,decode_tok_s") and len(csv) == len(rows) + 1
    assert (tmp_path / "sweep.png").read_bytes()[:4] == b"\x89PNG"  # type: ignore[operator]


def test_a_cancel_mid_step_leaves_the_slot_idle_within_a_second(
        llama_server: Callable[..., RealLlamaServer]) -> None:
    server = _server(llama_server)
    monitor = open_monitor(server.url, atlas=False)
    try:
        snap = monitor.poll()
        snap = monitor.poll()
        plan = plan_sweep(snap, by_name(str(snap.backend)), 15000, 4, GENERATE)
        deep = threading.Event()

        def seen(p: Progress) -> None:
            if p.phase == "reading" and p.depth_tokens >= 4096:
                deep.set()

        sweep = DepthSweep(target_for(monitor, snap), plan, snap, on_progress=seen)
        box: dict[str, object] = {}
        worker = threading.Thread(target=lambda: box.setdefault("r", sweep.run()))
        worker.start()
        assert deep.wait(60), "the sweep never got deep"
        time.sleep(0.05)  # a piece of the prompt is being read now
        busy = any(s["is_processing"] for s in httpx.get(f"{server.url}/slots", timeout=5).json())
        t_cancel = time.monotonic()
        sweep.cancel()
        while any(s["is_processing"] for s in httpx.get(f"{server.url}/slots", timeout=5).json()):
            assert time.monotonic() - t_cancel < 1.0, "the slot still works a second after the cancel"
            time.sleep(0.02)
        idle_after = time.monotonic() - t_cancel
        worker.join(10)
        result = box["r"]
        assert result.outcome == "cancelled"  # type: ignore[attr-defined]
        assert busy, "the cancel came between requests: nothing to cancel on the server"
        assert idle_after < 1.0
    finally:
        monitor.close()


def test_a_sweep_past_n_ctx_is_refused_with_the_reason(llama_server: Callable[..., RealLlamaServer]) -> None:
    server = llama_server("llama", ["-c", "8192", "-np", "1"])
    rc, _out, err = _run("sweep", server.url, "--to", "8192")
    assert rc == 3
    assert "refused" in err and "8,256 tokens of context" in err and "holds 8,192" in err and "-c" in err
    assert _log_prompt_tokens(server) == 0, "a refused sweep sent a request"


def test_the_plan_says_the_cost_and_sends_only_its_first_short_request(
        llama_server: Callable[..., RealLlamaServer]) -> None:
    server = _server(llama_server)
    rc, out, err = _run("sweep", server.url, "--to", "8192", "--plan")
    assert rc == 0, err
    assert "8,192 prompt tokens to read" in out and "at the prefill rate measured first" in out
    assert "within the 16.0 MiB the server reserved at load: it fits" in out
    assert _log_prompt_tokens(server) <= 512  # the calibration only


def test_the_atlas_keeps_a_sweep_for_its_configuration_and_the_forecast_uses_it(
        llama_server: Callable[..., RealLlamaServer]) -> None:
    server = _server(llama_server)
    rc, _out, err = _run("sweep", server.url, "--to", "4096", "--steps", "4")
    assert rc == 0, err
    rc, out, err = _run("once", server.url, "--json", "--interval", "0.2")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["atlas"]["points"] == 5 and doc["atlas"]["sweeps"] == 1 and doc["atlas"]["deepest_tokens"] == 4096
    # nothing decodes now, yet the forecast is fitted on the sweep's depths (this session measured none)
    assert doc["decode_tok_s"] is None and doc["forecast"]["fit"]["points"] == 5
    assert [m["context_tokens"] for m in doc["forecast"]["milestones"]] == [8192, 16384]
    server.stop()
    other = llama_server("llama-long", ["-c", "16384", "-np", "1", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on"])
    rc, out, err = _run("once", other.url, "--json", "--interval", "0.2")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["model"]["kv_type_k"] == "q8_0"
    assert doc["atlas"]["points"] == 0 and doc["forecast"]["fit"]["points"] == 0, "another configuration's curve"
