"""Child llama-server discovery against real processes: a fake ``ollama serve`` that spawns a fake llama-server.

The parent listens on a random port and answers Ollama's API from the constructed fixtures; its child
listens on another random port with an argv shaped like the one Ollama's ``llm/llama_server.go`` builds,
and answers ``/slots`` with a real llama-server capture.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers_http import wait_until
from repo_paths import FIXTURES

from kvmon.core.readings import Provenance, ServerConfig
from kvmon.sources.ollama.child import (
    OllamaChild,
    child_from_argv,
    choose_child,
    looks_like_llama_server,
    ollama_environment_config,
)
from kvmon.sources.ollama.source import ENABLE_LIVE_RATE_HINT, OllamaSource

FIX = FIXTURES
BLOB = "/usr/share/ollama/.ollama/models/blobs/sha256-667b0c1932bc6ffc593ed1d03f895bf2dc8dc6df21db3042284a6f4416b06a29"

CHILD = textwrap.dedent(
    """
    import sys
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    port = int(sys.argv[sys.argv.index("--port") + 1])
    slots = open(sys.argv[1] + "/llama-server/slots.generating.json", "rb").read()
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a): pass
        def do_GET(self):
            body = slots if self.path.startswith("/slots") else b'{"status":"ok"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
    ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
    """
)

PARENT = textwrap.dedent(
    """
    import json, socket, subprocess, sys
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    fix, child_script, blob = sys.argv[1], sys.argv[2], sys.argv[3]
    s = socket.socket(); s.bind(("127.0.0.1", 0)); child_port = s.getsockname()[1]; s.close()
    child = subprocess.Popen([sys.executable, child_script, fix, "--model", blob, "--port", str(child_port),
        "--host", "127.0.0.1", "--no-webui", "--offline", "-c", "16384", "-np", "2",
        "--cache-type-k", "q8_0", "--cache-type-v", "q8_0", "--flash-attn", "on", "-ngl", "99"])
    files = {"/api/version": "version.json", "/api/ps": "ps.full-offload.json"}
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a): pass
        def answer(self):
            n = int(self.headers.get("Content-Length") or 0)
            req = json.loads(self.rfile.read(n)) if n else {}
            if self.path == "/api/show":
                name = "show.llama3.1-8b" + (".verbose" if req.get("verbose") else "") + ".json"
            else:
                name = files.get(self.path)
            body = open(fix + "/ollama/" + name, "rb").read() if name else b"404 page not found"
            self.send_response(200 if name else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        do_GET = do_POST = answer
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
    print(json.dumps({"port": httpd.server_address[1], "child_pid": child.pid, "child_port": child_port}),
          flush=True)
    try:
        httpd.serve_forever()
    finally:
        child.kill()
    """
)


def _port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


def _dead_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


@pytest.fixture
def fake_ollama(tmp_path: Path) -> Iterator[dict]:
    child_script = tmp_path / "llama-server.py"
    child_script.write_text(CHILD)
    parent_script = tmp_path / "ollama.py"
    parent_script.write_text(PARENT)
    env = dict(os.environ, OLLAMA_NUM_PARALLEL="2", OLLAMA_KV_CACHE_TYPE="q8_0")
    proc = subprocess.Popen([sys.executable, str(parent_script), str(FIX), str(child_script), BLOB],
                            stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        assert wait_until(lambda: _port_open(info["child_port"]), 10), "child llama-server did not start"
        info["pid"] = proc.pid
        yield info
    finally:
        proc.terminate()
        proc.wait(5)
        try:
            os.kill(info["child_pid"], signal.SIGKILL)
        except (OSError, NameError, UnboundLocalError):
            pass


def test_finds_the_child_and_reads_its_slots(fake_ollama: dict) -> None:
    src = OllamaSource(f"http://127.0.0.1:{fake_ollama['port']}", proxy_url=f"http://127.0.0.1:{_dead_port()}")
    try:
        r = src.poll()
    finally:
        src.close()
    assert r.live_rate_source == "child_slots", r.live_rate_unavailable_reason
    assert r.live_rate_unavailable_reason is None
    assert set(r.server_pids) == {fake_ollama["pid"], fake_ollama["child_pid"]}
    assert len(r.slots) == 1
    slot = r.slots[0]
    assert slot.processing and slot.n_decoded == 1037 and slot.context_tokens == 1066 and slot.n_ctx == 16384
    c = r.config
    assert c.n_ctx_total == 16384 and c.n_parallel == 2
    assert c.type_k == "q8_0" and c.type_v == "q8_0" and c.flash_attn == "on" and c.n_gpu_layers == 99
    assert c.model_path == BLOB and r.model is not None and r.model.path == BLOB
    assert c.provenance["type_k"] is Provenance.COMMAND_LINE
    assert c.n_ctx_per_slot == 8192  # Ollama's own context_length for one conversation


def test_child_gone_falls_back_to_unavailable(fake_ollama: dict) -> None:
    src = OllamaSource(f"http://127.0.0.1:{fake_ollama['port']}", proxy_url=f"http://127.0.0.1:{_dead_port()}")
    try:
        assert src.poll().live_rate_source == "child_slots"
        os.kill(fake_ollama["child_pid"], signal.SIGKILL)
        assert wait_until(lambda: not _port_open(fake_ollama["child_port"]), 5)
        r = src.poll()
    finally:
        src.close()
    assert r.live_rate_source is None and r.slots == ()
    assert r.live_rate_unavailable_reason and ENABLE_LIVE_RATE_HINT in r.live_rate_unavailable_reason
    assert r.model is not None and r.model.name == "llama3.1:8b"  # the rest of the reading is unaffected


def test_no_process_on_the_port_is_a_reason_not_an_error() -> None:
    from ollama_fixture import OllamaFixture

    server = OllamaFixture()
    src = OllamaSource(server.url, proxy_url=f"http://127.0.0.1:{_dead_port()}")
    try:
        r = src.poll()  # the fixture runs in this very process, which has no llama-server child
    finally:
        src.close()
        server.stop()
    assert r.live_rate_source is None
    assert r.live_rate_unavailable_reason and "no llama-server child" in r.live_rate_unavailable_reason


def test_argv_recognition() -> None:
    argv = ["/usr/lib/ollama/llama-server", "--model", BLOB, "--port", "41234", "--host", "127.0.0.1",
            "--no-webui", "--offline", "-c", "8192", "-np", "1", "--flash-attn", "auto"]
    assert looks_like_llama_server(argv)
    child = child_from_argv(7, 1.0, argv)
    assert child is not None and child.port == 41234 and child.url == "http://127.0.0.1:41234"
    assert child.config.n_ctx_total == 8192 and child.config.flash_attn == "auto"
    assert not looks_like_llama_server(["/usr/bin/ollama", "serve"])
    assert not looks_like_llama_server(["llama-server", "--port", "x", "--model", "m"])
    assert child_from_argv(8, 1.0, ["python", "-m", "http.server", "--port", "8000"]) is None


def test_choose_child_by_model_blob() -> None:
    def mk(pid: int, path: str | None) -> OllamaChild:
        return OllamaChild(pid, 0.0, "127.0.0.1", 40000 + pid, ServerConfig(model_path=path))

    a, b = mk(1, "/m/blobs/sha256-aaa"), mk(2, "/m/blobs/sha256-bbb")
    assert choose_child([a, b], "/other/root/blobs/sha256-bbb")[0] is b
    assert choose_child([a], None)[0] is a
    none, why = choose_child([a, b], None)
    assert none is None and why and "2 llama-server children" in why
    none, why = choose_child([a, b], "/m/blobs/sha256-ccc")
    assert none is None and why and "sha256-ccc" in why
    assert choose_child([], None)[0] is None


def test_ollama_environment_settings() -> None:
    c = ollama_environment_config(
        {"OLLAMA_KV_CACHE_TYPE": "q8_0", "OLLAMA_FLASH_ATTENTION": "1", "OLLAMA_NUM_PARALLEL": "4"}
    )
    assert c.type_k == c.type_v == "q8_0" and c.flash_attn == "on" and c.n_parallel == 4
    assert c.provenance["type_k"] is Provenance.USER
    empty = ollama_environment_config({"OLLAMA_NUM_PARALLEL": "lots"})
    assert empty.n_parallel is None and empty.type_k is None and empty.provenance == {}


# Ollama v0.33.0-rc2, llm/llama_server.go startLlamaServer: the flags in the order it appends them, for a model at
# the defaults (num_batch 512, no OLLAMA_KV_CACHE_TYPE, num_gpu -1: no -ngl) on a GPU with flash attention
OLLAMA_ARGV = ["/usr/lib/ollama/llama-server", "--model", BLOB, "--port", "38421", "--host", "127.0.0.1",
               "--no-webui", "--offline", "-c", "8192", "-np", "2", "--log-verbosity", "4", "--no-log-prefix",
               "--no-log-timestamps", "--flash-attn", "auto", "-b", "512", "-ub", "512"]
# an Ollama before 0.30 in a user's log (https://github.com/atineiatte/deep-research-at-home/issues/14):
# msg="starting llama server" cmd="/mnt/data/ollama/bin/ollama runner --ollama-engine --model ... --port 35253"
OLD_RUNNER = ["/mnt/data/ollama/bin/ollama", "runner", "--ollama-engine", "--model",
              "/mnt/data/ollama/blobs/sha256-e8ad13eff07a78d89926e9e8b882317d082ef5bf9768ad7b50fcdbbcd63748de",
              "--ctx-size", "8192", "--batch-size", "512", "--threads", "42", "--no-mmap", "--parallel", "2",
              "--port", "35253"]


def test_ollamas_own_command_line_is_matched_and_read() -> None:
    from kvmon.sources.ollama.child import classify_child

    assert classify_child(OLLAMA_ARGV) == ("model", None)
    child = child_from_argv(11, 2.0, OLLAMA_ARGV)
    assert child is not None and child.port == 38421
    c = child.config
    assert (c.n_ctx_total, c.n_parallel, c.flash_attn, c.n_batch, c.n_ubatch) == (8192, 2, "auto", 512, 512)
    assert c.type_k == "f16" and c.provenance["type_k"] is Provenance.DEFAULT  # Ollama passed none: llama's f16
    windows = ["C:\\Program Files\\Ollama\\lib\\ollama\\llama-server.exe", *OLLAMA_ARGV[1:]]
    assert classify_child(windows)[0] == "model"


@pytest.mark.parametrize(("argv", "kind", "words"), [
    # discover/llama_server.go: the short-lived GPU probe
    (["/usr/lib/ollama/llama-server", "--port", "51234", "--host", "127.0.0.1", "--no-webui", "--offline",
      "--verbose"], "probe", "discover the GPUs"),
    # x/mlxrunner/client.go: an MLX model
    (["/usr/bin/ollama", "runner", "--mlx-engine", "--model", "qwen3:8b", "--port", "40001"], "mlx", "MLX"),
    (OLD_RUNNER, "runner", "before 0.30"),
    (["/opt/llama-server", "-m", "/m/x.gguf", "--port", "8081"], "llama-server", "no --model, --host"),
    (["/usr/bin/ollama", "serve"], "other", None),
])
def test_every_other_child_is_named_in_the_reason(argv: list[str], kind: str, words: str | None) -> None:
    from kvmon.sources.ollama.child import classify_child

    got, why = classify_child(argv)
    assert got == kind
    assert (why is None) if words is None else (why is not None and words in why), why


def test_the_simulated_ollama_runs_its_model_server_as_a_child_and_kvmon_reads_it() -> None:
    """The simulator's Ollama starts a real llama-server child process with Ollama's flags; kvmon finds it under
    the process listening on Ollama's port (this one) and reads its /slots; when it goes, the reason says so."""
    import time

    from kvmon.sim.server import SimServer
    from kvmon.sources.ollama.child import classify_child

    sim = SimServer("ollama-partial", speed=5.0, ollama_child=True)
    url = sim.start()
    src = OllamaSource(url, timeout_s=3.0, proxy_url=f"http://127.0.0.1:{_dead_port()}")
    try:
        assert sim.child is not None and sim.child_port is not None
        assert wait_until(lambda: _port_open(sim.child_port), 10)
        import psutil

        argv = psutil.Process(sim.child.pid).cmdline()
        assert classify_child(argv) == ("model", None)
        first = src.poll()
        assert first.live_rate_source == "child_slots", first.live_rate_unavailable_reason
        assert sim.child.pid in first.server_pids and first.config.n_ctx_total == 32768
        assert first.config.provenance["n_ctx_total"] is Provenance.COMMAND_LINE
        time.sleep(0.6)
        second = src.poll()
        assert second.slots and second.slots[0].n_decoded is not None
        sim.child.kill()
        sim.child.wait(5)
        assert wait_until(lambda: not _port_open(sim.child_port or 0), 5)
        gone = src.poll()
    finally:
        src.close()
        sim.stop()
    assert gone.live_rate_source is None
    assert gone.live_rate_unavailable_reason and ENABLE_LIVE_RATE_HINT in gone.live_rate_unavailable_reason


def test_a_log_value_holding_a_unicode_line_separator_stays_on_its_line(tmp_path: Path) -> None:
    """Ollama's log lines end at "\\n" only: a U+2028 or U+0085 inside a value does not cut its "server config" line."""
    from kvmon.sources.ollama.child import ollama_log_config

    for sep in ("\u2028", "\u0085"):
        log = tmp_path / "ollama.log"
        log.write_text(f'level=INFO msg="server config" env="map[OLLAMA_ORIGINS:[a{sep}b] OLLAMA_NUM_PARALLEL:4]"\n',
                       encoding="utf-8")
        cfg, why = ollama_log_config(str(log))
        assert why is None and cfg is not None and cfg.n_parallel == 4
