"""Process discovery against a real child process that listens like a llama-server with a fake argv."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from helpers_http import LLAMA_FIXTURES

from kvmon.sources import procs
from kvmon.sources.llamacpp.source import LlamaServerSource

CHILD = textwrap.dedent(
    """
    import sys, pathlib
    from http.server import BaseHTTPRequestHandler, HTTPServer
    fixtures = pathlib.Path(sys.argv[1])
    files = {"/health": "health.idle.json", "/props": "props.idle.json", "/slots": "slots.idle.json",
             "/metrics": "metrics.idle.txt", "/v1/models": "v1-models.idle.json"}
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a): pass
        def do_GET(self):
            name = files.get(self.path.split("?")[0])
            body = (fixtures / name).read_bytes() if name else b"{}"
            self.send_response(200 if name else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
    srv = HTTPServer(("127.0.0.1", 0), H)
    print(srv.server_address[1], flush=True)
    srv.serve_forever()
    """
)


@pytest.fixture
def fake_llama_server(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], int]]:
    script = tmp_path / "llama-server"
    script.write_text(CHILD)
    argv = [sys.executable, str(script), str(LLAMA_FIXTURES), "-m", "tiny-llama-e256-l4.gguf", "-c", "16384",
            "-np", "1", "--cache-type-k=q8_0", "-ctv", "q8_0", "-fa", "on", "-ngl", "0", "--port", "0"]
    env = {**os.environ, "LLAMA_ARG_UBATCH": "256", "LLAMA_API_KEY": "never-read"}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        yield proc, port
    finally:
        proc.terminate()
        proc.wait(timeout=5)


def test_find_listening_process(fake_llama_server: tuple[subprocess.Popen[str], int]) -> None:
    child, port = fake_llama_server
    p = procs.find_listening_process(port)
    assert p is not None and p.pid == child.pid
    argv, why = procs.process_cmdline(p)
    assert why is None and argv is not None and "-ctv" in argv
    env, why = procs.process_environ(p)
    assert why is None and env == {"LLAMA_ARG_UBATCH": "256"}  # only LLAMA_ARG_* kept
    assert procs.process_tree_pids(child.pid) == (child.pid,)


def test_source_learns_config_from_process(fake_llama_server: tuple[subprocess.Popen[str], int],
                                           tmp_path: Path) -> None:
    child, port = fake_llama_server
    src = LlamaServerSource(f"http://127.0.0.1:{port}", timeout_s=2.0)
    r = src.poll()
    c = r.config
    assert (c.type_k, c.type_v, c.flash_attn, c.n_gpu_layers, c.n_ubatch) == ("q8_0", "q8_0", "on", 0, 256)
    assert c.n_ctx_total == 16384 and c.kv_unified is False
    assert c.provenance["type_k"] == "command_line"
    assert c.model_path == "tiny-llama-e256-l4.gguf"
    assert r.server_pids == (child.pid,)
    # the relative -m is resolved against the server's working directory (no such file there: a reason)
    assert str(tmp_path) not in r.reasons.get("model.shape", "")
    assert "not readable here" in r.reasons["model.shape"]
    src.close()


def test_nobody_listening() -> None:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    p, why = procs.lookup_listening_process(port)
    assert p is None and why and str(port) in why


def test_gone_process_helpers() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert procs.process_tree_pids(child.pid) == ()


def test_access_denied_is_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    p = psutil.Process()

    def denied(*a: object, **k: object) -> None:
        raise psutil.AccessDenied(p.pid)

    monkeypatch.setattr(psutil.Process, "cmdline", denied)
    monkeypatch.setattr(psutil.Process, "environ", denied)
    argv, why = procs.process_cmdline(p)
    assert argv is None and why and "not readable" in why
    env, why = procs.process_environ(p)
    assert env is None and why and "not readable" in why


def test_net_connections_denied_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(*a: object, **k: object) -> None:
        raise psutil.AccessDenied()

    monkeypatch.setattr(psutil, "net_connections", denied)
    p, why = procs.lookup_listening_process(1)
    assert p is None and why


def test_is_local_host() -> None:
    assert procs.is_local_host("127.0.0.1") and procs.is_local_host("localhost") and procs.is_local_host("[::1]")
    assert not procs.is_local_host("example.invalid") and not procs.is_local_host(None)


TREE = textwrap.dedent(
    """
    import subprocess, sys, threading, time
    if sys.argv[1] == "0":
        time.sleep(30)
    else:  # a child that has a child of its own, and one started from another thread
        procs = [subprocess.Popen([sys.executable, __file__, str(int(sys.argv[1]) - 1)])]
        threading.Thread(target=lambda: procs.append(subprocess.Popen([sys.executable, __file__, "0"]))).start()
        print("up", flush=True)
        time.sleep(30)
    """
)


def test_the_process_tree_holds_every_descendant_and_none_once_gone(tmp_path: Path) -> None:
    script = tmp_path / "tree.py"
    script.write_text(TREE)
    top = subprocess.Popen([sys.executable, str(script), "2"], stdout=subprocess.PIPE, text=True)
    try:
        assert top.stdout is not None and top.stdout.readline().strip() == "up"
        walked: set[int] = set()
        for _ in range(100):  # until the grandchildren are up too
            walked = {top.pid, *(c.pid for c in psutil.Process(top.pid).children(recursive=True))}
            if len(walked) == 5:
                break
            psutil.wait_procs([], timeout=0.05)
        tree = procs.process_tree_pids(top.pid)
        assert len(walked) == 5 and set(tree) == walked and tree[0] == top.pid
    finally:
        for c in psutil.Process(top.pid).children(recursive=True):
            c.kill()
        top.kill()
        top.wait(10)
    assert procs.process_tree_pids(top.pid) == ()  # gone

