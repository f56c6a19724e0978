"""Finding every server on this machine: command lines classified, real processes found on any port (a
llama-server, a router, llama-swap, Ollama — its own llama-server child left out), and ``kvmon once --list``."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from helpers_http import LLAMA_FIXTURES, wait_until
from repo_paths import FIXTURES

from kvmon.cli import main as kvmon_main
from kvmon.sources import backends, detect
from kvmon.sources.discover import classify, discover, scan_processes

FIX = FIXTURES

# A process that answers like one server from fixture files, whatever its argv says (the argv is what is tested).
SERVE = textwrap.dedent(
    """
    import json, pathlib, socket, subprocess, sys
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    args = [a for a in sys.argv[1:] if a != "serve"]
    kind, fix = args[0], pathlib.Path(args[1])
    files = {
        "llama": {"/props": "llama-server/props.idle.json", "/health": "llama-server/health.idle.json",
                  "/slots": "llama-server/slots.idle.json"},
        "router": {"/props": "llama-router/props.router.json", "/models": "llama-router/models.loaded.json"},
        "ollama": {"/api/version": "ollama/version.json", "/api/ps": "ollama/ps.full-offload.json"},
    }[kind]
    if kind == "ollama":  # Ollama's model server, with Ollama's flags: part of Ollama, never listed alone
        child = subprocess.Popen([sys.executable, args[2], "--model", "/blobs/sha256-0", "--port", "0",
                                  "--host", "127.0.0.1", "--no-webui", "--offline", "-c", "8192", "-np", "1"],
                                 stdin=subprocess.DEVNULL)
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a): pass
        def do_GET(self):
            name = files.get(self.path.split("?")[0])
            body = (fix / name).read_bytes() if name else b"404 page not found"
            self.send_response(200 if name else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
    port = 0
    if "--port" in sys.argv:
        port = int(sys.argv[sys.argv.index("--port") + 1])
    srv = ThreadingHTTPServer(("127.0.0.1", port), H)
    print(srv.server_address[1], flush=True)
    srv.serve_forever()
    """
)
IDLE = textwrap.dedent(
    """
    import time
    time.sleep(60)
    """
)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _started(argv: list[str]) -> Iterator[tuple[subprocess.Popen[str], int]]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        yield proc, port
    finally:
        for c in psutil.Process(proc.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                c.kill()
        proc.terminate()
        proc.wait(5)


@pytest.fixture
def scripts(tmp_path: Path) -> dict[str, str]:
    names = {"llama": "llama-server", "router": "llama-server", "ollama": "ollama", "child": "llama-server.py"}
    out: dict[str, str] = {}
    for key, name in names.items():
        d = tmp_path / key
        d.mkdir()
        (d / name).write_text(IDLE if key == "child" else SERVE)
        out[key] = str(d / name)
    return out


def test_command_lines_are_classified() -> None:
    cases = [
        (["/usr/local/bin/llama-server", "-m", "/m/q.gguf", "--port", "18080"], (backends.LLAMA_SERVER, (18080,))),
        (["llama-server", "-hf", "ggml-org/gemma-3-1b-it-GGUF"], (backends.LLAMA_SERVER, (9931, 8080))),
        (["llama-server", "--models-dir", "/m", "--port", "9931"], (backends.ROUTER, (9931,))),
        (["llama-server", "--host", "0.0.0.0"], (backends.ROUTER, (9931, 8080))),  # no model: a router
        (["python3", "-u", "/srv/llama_server_child.py", "-m", "x.gguf"], (backends.LLAMA_SERVER, (9931, 8080))),
        (["C:\\llama\\llama-server.exe", "-m", "x.gguf", "--port=8081"], (backends.LLAMA_SERVER, (8081,))),
        (["/usr/bin/llama-swap", "-config", "c.yaml", "-listen", "localhost:9292"], (backends.LLAMA_SWAP, (9292,))),
        (["llama-swap", "--config", "c.yaml"], (backends.LLAMA_SWAP, (8080,))),  # llama-swap.go: default :8080
        (["/usr/local/bin/ollama", "serve"], (backends.OLLAMA, (11434,))),
        (["ollama", "run", "qwen3"], None),  # the CLI client, not the server
        (["/usr/bin/python3", "-m", "http.server", "8000"], None),
    ]
    for argv, want in cases:
        got = classify(argv)
        assert (got[:2] if got else None) == want, argv
    env_port = classify(["llama-server", "-m", "x.gguf"], {"LLAMA_ARG_PORT": "7000"})
    assert env_port is not None and env_port[1] == (7000,)
    # a port that is no port (negative, not digits) is not taken: the defaults are tried
    assert classify(["llama-server", "-m", "x.gguf", "--port", "-1"])[1] == (9931, 8080)  # type: ignore[index]
    assert classify(["vllm", "serve", "m", "--port", "x"])[1] == (8000,)  # type: ignore[index]
    assert classify(["llama-server"], {"LLAMA_ARG_MODEL": "/m/x.gguf"})[0] == backends.LLAMA_SERVER  # type: ignore[index]
    assert classify(["ollama", "serve"], {"OLLAMA_HOST": "127.0.0.1:11500"})[1] == (11500,)  # type: ignore[index]
    # llama.cpp b11549's default first, then the older one, Ollama's, vLLM's and LM Studio's
    assert detect.WELL_KNOWN_PORTS == (9931, 8080, 11434, 8000, 1234)
    assert classify(["vllm", "serve", "Qwen/Qwen3-8B", "--port", "8001", "--host", "0.0.0.0"]) == (
        backends.VLLM, (8001,), "0.0.0.0")
    assert classify(["/usr/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"]) == (
        backends.VLLM, (8000,), "127.0.0.1")
    assert classify(["/opt/LM Studio/lm-studio"]) == (backends.LMSTUDIO, (1234,), "127.0.0.1")
    assert classify(["vllm", "bench"]) is None
    # Ollama's model server, by its whole command line (llm/llama_server.go): read through Ollama, even when its
    # parent cannot be read; a llama-server someone started with a few of those flags is still listed
    from kvmon.sources.discover import _ollamas_own

    ollamas = ["/usr/lib/ollama/llama-server", "--model", "/b/sha256-1", "--port", "40001", "--host", "127.0.0.1",
               "--no-webui", "--offline", "-c", "8192", "-np", "1", "--log-verbosity", "4", "--no-log-prefix",
               "--no-log-timestamps"]
    assert _ollamas_own(ollamas) and not _ollamas_own(ollamas[:-3])


def test_servers_on_any_port_are_found_from_the_process_table(scripts: dict[str, str]) -> None:
    port = _free_port()
    llama_argv = [sys.executable, scripts["llama"], "llama", str(FIX), "-m", "q.gguf", "--port", str(port)]
    router_argv = [sys.executable, scripts["router"], "router", str(FIX), "--models-dir", "/m"]
    ollama_argv = [sys.executable, scripts["ollama"], "serve", "ollama", str(FIX), scripts["child"]]
    with _started(llama_argv) as (llama, lport), _started(router_argv) as (router, rport), \
            _started(ollama_argv) as (oll, oport):
        assert lport == port
        mine = {llama.pid, router.pid, oll.pid}
        assert wait_until(lambda: len(psutil.Process(oll.pid).children()) == 1, 10)
        child = psutil.Process(oll.pid).children()[0]
        ours = [*(psutil.Process(p) for p in sorted(mine)), child]
        found = {c.pid: c for c in scan_processes(lambda: ours)}
        assert set(found) == mine, "Ollama's own llama-server is read through Ollama, not listed"
        assert found[llama.pid].kind == backends.LLAMA_SERVER and found[llama.pid].ports == (port,)
        assert found[router.pid].kind == backends.ROUTER and found[router.pid].ports == (rport,)  # its socket
        assert found[oll.pid].kind == backends.OLLAMA and found[oll.pid].ports == (oport,)
        assert "llama-server" in found[llama.pid].what and f"--port {port}" in found[llama.pid].what

        d = discover(ports=(), process_iter=lambda: ours, timeout_s=2.0)
        by_url = {f.url: f for f in d.found}
        assert by_url[f"http://127.0.0.1:{port}"].backend == backends.LLAMA_SERVER
        assert by_url[f"http://127.0.0.1:{rport}"].backend == backends.ROUTER
        assert by_url[f"http://127.0.0.1:{oport}"].backend == backends.OLLAMA
        assert by_url[f"http://127.0.0.1:{rport}"].summary == "1 models, 1 loaded: tiny-llama-F32"
        assert by_url[f"http://127.0.0.1:{oport}"].summary == "loaded: llama3.1:8b"
        assert all(f.how.startswith(f"process {f.pid} (") for f in d.found)


def test_a_process_that_does_not_answer_is_listed_with_why(scripts: dict[str, str]) -> None:
    quiet = Path(scripts["llama"]).with_name("llama-server-quiet")
    quiet.write_text("import sys, time\nprint(0, flush=True)\ntime.sleep(60)\n")
    port = _free_port()
    with _started([sys.executable, str(quiet), "-m", "x.gguf", "--port", str(port)]) as (proc, _):
        d = discover(ports=(), process_iter=lambda: [psutil.Process(proc.pid)], timeout_s=0.5)
    assert len(d.found) == 1
    f = d.found[0]
    assert (f.url, f.answering, f.backend) == (f"http://127.0.0.1:{port}", False, backends.LLAMA_SERVER)
    assert f.reason and "cannot connect" in f.reason
    assert d.answering() == ()


def _once(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = kvmon_main(["once", *argv])
    return rc, out.getvalue(), err.getvalue()


def test_once_list_names_every_server_and_how_it_was_found(scripts: dict[str, str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import kvmon.sources.discover as disc

    port = _free_port()
    argv = [sys.executable, scripts["llama"], "llama", str(FIX), "-m", "q.gguf", "--port", str(port)]
    with _started(argv) as (llama, _), \
            _started([sys.executable, scripts["router"], "router", str(FIX), "--port", str(_free_port())]) as (r, rp):
        ours = [psutil.Process(llama.pid), psutil.Process(r.pid)]
        real = disc.discover
        monkeypatch.setattr(disc, "discover", lambda **kw: real(**{**kw, "ports": (), "process_iter": lambda: ours}))
        rc, out, err = _once("--list")
        assert rc == 0, err
        lines = out.splitlines()
        assert lines[0] == "2 servers found:"
        assert any(f"http://127.0.0.1:{port}" in ln and "llama-server b" in ln and f"process {llama.pid}" in ln
                   for ln in lines), out
        assert any(f"http://127.0.0.1:{rp}" in ln and "llama-server router" in ln for ln in lines), out
        rc, out, _ = _once("--list", "--json")
        doc = json.loads(out)
        assert rc == 0 and {s["backend"] for s in doc["servers"]} == {"llama-server", "llama-router"}
        assert all(set(s) >= {"url", "backend", "found_by", "pid", "answering"} for s in doc["servers"])
        # plain `once` reads the first one and names the others
        rc, out, err = _once("--json", "--interval", "0")
        assert rc == 0 and "also found" in err and "kvmon once --list" in err
        assert json.loads(out)["url"] == f"http://127.0.0.1:{port}"
    monkeypatch.setattr(disc, "discover", lambda **kw: real(**{**kw, "ports": (), "process_iter": lambda: []}))
    rc, out, err = _once("--list")
    nothing = "no llama-server, router, llama-swap, Ollama, vLLM or LM Studio found"
    assert rc == 2 and out.startswith(nothing + ": looked at the process")
    rc, out, err = _once("--json")
    assert rc == 2 and out == "" and err.startswith("kvmon: " + nothing)


def test_fixture_paths_exist() -> None:
    assert (LLAMA_FIXTURES / "props.idle.json").exists() and (FIX / "ollama" / "version.json").exists()
    assert os.path.exists(FIX / "llama-router" / "models.loaded.json")


def test_discover_finds_simulated_vllm_and_lmstudio_on_their_ports() -> None:
    from kvmon.sim.server import SimServer
    from kvmon.sources.discover import discover

    with SimServer("vllm") as v, SimServer("lmstudio") as lms:
        found = discover(ports=[v.port, lms.port], processes=False, timeout_s=2.0)
    got = {(f.url, f.backend, f.summary) for f in found.answering()}
    assert got == {(v.url, "vllm", "serving: Qwen/Qwen3-8B"), (lms.url, "lmstudio", "loaded: google/gemma-3-12b")}
