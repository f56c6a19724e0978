"""The simulated Ollama's model server: a real child process with the command line Ollama (>= 0.30) gives its
llama-server (``llm/llama_server.go``, ``startLlamaServer``), answering llama-server's ``/health``, ``/props`` and
``/slots`` from the same simulation.

It is a small script named ``llama-server`` in the simulator's own folder, run by this Python, on a free port; it
forwards each request to the simulated server (``CHILD_PREFIX`` + path), which answers it as its llama-server API
would. So kvmon finds it exactly as it finds Ollama's real child: a descendant of the process listening on Ollama's
port, whose argv has Ollama's flags. It exits with the simulator (and with its parent).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from typing import Any

CHILD_PREFIX = "/_kvmon_sim_child"  # where the simulated Ollama answers for its child (never on a real Ollama)

SCRIPT = '''
import ctypes, signal, sys, urllib.error, urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
try:
    ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: go when the simulator goes
except OSError:
    pass
parent = sys.argv[1] + sys.argv[2]  # the simulated server's URL and the prefix it answers for its child at
LOADING = b'{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}'
port = int(sys.argv[sys.argv.index("--port") + 1])
class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def do_GET(self):
        try:
            with urllib.request.urlopen(parent + self.path, timeout=5) as r:
                status, body, ctype = r.status, r.read(), r.headers.get("Content-Type", "application/json")
        except urllib.error.HTTPError as e:
            status, body, ctype = e.code, e.read(), "application/json"
        except OSError:
            status, body, ctype = 503, LOADING, "application/json"
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ollama_flags(sim: Any, port: int) -> list[str]:
    """The flags Ollama gives its llama-server for the simulated model, in its order."""
    sc = sim.scenario
    argv = ["--model", sim.model_path, "--port", str(port), "--host", "127.0.0.1", "--no-webui", "--offline",
            "-c", str(sc.n_ctx), "-np", str(sc.n_parallel),
            "--log-verbosity", "4", "--no-log-prefix", "--no-log-timestamps"]
    if sc.type_k != "f16" or sc.type_v != "f16":  # OLLAMA_KV_CACHE_TYPE set: one type for K and V
        argv += ["--cache-type-k", sc.type_k, "--cache-type-v", sc.type_k]
    return [*argv, "--flash-attn", sc.flash_attn, "-b", "512", "-ub", "512"]


def start_child(sim: Any) -> tuple[subprocess.Popen[bytes], int]:
    """Start the model server process for a simulated Ollama; (process, its port)."""
    script = os.path.join(sim.files_dir, "llama-server")
    with open(script, "w", encoding="utf-8") as f:
        f.write(SCRIPT)
    port = _free_port()
    # the simulator's URL and the prefix go first, to the script; then Ollama's flags, in its order
    argv = [sys.executable, script, sim.url, CHILD_PREFIX, *ollama_flags(sim, port)]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, port


def wait_ready(proc: subprocess.Popen[bytes] | None, port: int | None, timeout_s: float = 10.0) -> bool:
    """Wait until the child listens on its port (a stepped demo's first poll must find it, as a real Ollama's child
    is found once it has started); False when it did not within ``timeout_s`` or has exited."""
    if proc is None or port is None:
        return False
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.02)
    return False


def stop_child(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(3)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
