"""The new serving defaults against the real llama.cpp b11549 server: found from the process table on a port of its
own, -np auto (4 slots, unified KV), --fit and its target, the host prompt cache (--cache-ram) read from the command
line as the server's own log states them, and a server that sleeps when idle let fall asleep while kvmon watches."""

from __future__ import annotations

import contextlib
import io
import json
import socket
import time
from collections.abc import Callable

import httpx
import psutil
from real_llama_server import RealLlamaServer

from kvmon.cli import main as kvmon_main
from kvmon.sources.backends import LLAMA_SERVER
from kvmon.sources.discover import discover
from kvmon.sources.llamacpp.log import parse_llama_log
from kvmon.sources.llamacpp.source import LlamaServerSource

MIB = 1024 * 1024


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_found_on_its_own_port_and_its_new_defaults_read(llama_server: Callable[..., RealLlamaServer]) -> None:
    port = _free_port()
    server = llama_server("llama", ["-c", "8192", "--port", str(port), "--metrics", "--cache-ram", "512",
                                    "--fit-target", "256"])
    assert server.proc is not None
    d = discover(ports=(), process_iter=lambda: [psutil.Process(server.proc.pid)], timeout_s=3.0)  # type: ignore[union-attr]
    assert [(f.url, f.backend) for f in d.found] == [(f"http://127.0.0.1:{port}", LLAMA_SERVER)]
    assert d.found[0].how.startswith(f"process {server.proc.pid} (") and d.found[0].summary  # type: ignore[union-attr]

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = kvmon_main(["once", server.url, "--json", "--interval", "0"])
    assert rc == 0
    doc = json.loads(out.getvalue())
    m, prov = doc["model"], doc["provenance"]
    # -np not given: auto, 4 slots sharing one unified KV pool of the whole context
    assert (m["n_slots"], m["kv_unified"], m["n_ctx"], m["n_ctx_total"]) == (4, True, 8192, 8192)
    assert (m["fit"], m["fit_target_bytes"]) == (True, [256 * MIB])
    assert doc["host"]["prompt_cache_limit_bytes"] == 512 * MIB and prov["prompt_cache_limit_bytes"] == "command_line"
    # what the server's own log says at -lv 4, against what kvmon read from its command line
    log = parse_llama_log(server.log_lines())
    assert (log.n_parallel, log.kv_unified, log.prompt_cache_limit_bytes) == (4, True, 512 * MIB)
    assert any("will leave" in line and ">= 256 MiB" in line for line in server.log_lines()), \
        "--fit kept the margin it was given"
    assert m["kv_allocated_bytes"] == log.kv_bytes_allocated


def test_a_server_that_sleeps_when_idle_falls_asleep_while_watched(
        llama_server: Callable[..., RealLlamaServer]) -> None:
    """Every /slots request restarts the idle timer: kvmon stops asking once idle, so the server sleeps; a request
    wakes it and kvmon reads its slots again."""
    server = llama_server("llama", ["-c", "2048", "-np", "1", "--metrics", "--sleep-idle-seconds", "2"])
    src = LlamaServerSource(server.url, timeout_s=5.0)
    states: list[str] = []
    try:
        deadline = time.monotonic() + 20.0
        while time.monotonic() < deadline:
            r = src.poll()
            states.append(r.state)
            if r.state == "sleeping":
                break
            time.sleep(1.0)
        assert states[-1] == "sleeping", states
        assert httpx.get(f"{server.url}/props", timeout=5).json()["is_sleeping"] is True
        httpx.post(f"{server.url}/completion", json={"prompt": "hi", "n_predict": 4}, timeout=30)  # wakes it
        awake = src.poll()
    finally:
        src.close()
    assert awake.state == "ok" and awake.slots and awake.slots[0].n_decoded is not None


def test_the_embedded_server_has_no_router_mode() -> None:
    """Why router mode is tested against captured answers and the simulator: the wheel refuses to start without a
    model. Should a later wheel start a router, this fails, and the router tests should move to the real one."""
    import subprocess
    import sys

    code = ("import xllamacpp\np = xllamacpp.CommonParams()\np.models_dir = '.'\n"
            "try:\n    xllamacpp.Server(p)\nexcept ValueError as e:\n    print('REFUSED', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "REFUSED params.model.path is required: xllamacpp disabled the router server feature" in out.stdout, \
        out.stdout + out.stderr
