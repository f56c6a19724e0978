"""The HTTP API of the simulated llama-swap (``kvmon.sim.multi.MultiSim`` with a llama-swap scenario).

Shaped like mostlygeek/llama-swap's ``internal/server``: ``GET /health`` is the text ``OK`` (no key needed);
``GET /v1/models`` (and ``/models``) lists every configured model with ``status.value`` ``loaded`` or ``unloaded``
and ``meta.llamaswap``; ``GET /running`` the processes not stopped with ``state`` (``starting``, ``ready``,
``stopping``), the resolved ``cmd``, ``proxy`` and ``ttl`` (``api.go``); ``GET /metrics`` host gauges only
(``internal/perf/prometheus.go``); ``/upstream/<model>/…`` and model-dispatched requests START a stopped model
(swapping out the running one: the default group swaps). A request with the wrong key gets 401 with
``WWW-Authenticate: Basic realm="llama-swap"`` and a ``llama-swap: …`` text or JSON envelope (``auth.go``,
``swaputil/http.go``).
"""

from __future__ import annotations

import shlex
from typing import Any

from kvmon.sim.reply import Reply, json_reply, parse_body

VERSION = "v250"
MODEL_POSTS = ("/v1/chat/completions", "/v1/completions", "/completion", "/v1/embeddings", "/v1/responses")
_STATE = {"loading": "starting", "loaded": "ready", "sleeping": "ready", "unloading": "stopping"}


def _error(request: dict[str, str], status: int, message: str, kind: str,
           headers: dict[str, str] | None = None) -> Reply:
    """llama-swap's error: ``llama-swap: …`` text when the request accepts text/plain, else its JSON envelope."""
    if "text/plain" in request.get("accept", ""):
        return Reply(status, f"llama-swap: {message}".encode(), "text/plain", dict(headers or {}))
    envelope = {"src": "llama-swap", "error": {"message": message, "type": kind, "param": None, "code": str(status)}}
    return json_reply(envelope, status, headers=dict(headers or {}))


class SwapApi:
    """Routes one request of the simulated llama-swap."""

    public_paths = ("/health", "/wol-health")

    def __init__(self, sim: Any) -> None:
        self.sim = sim

    def unauthorized(self, headers: dict[str, str]) -> Reply:
        return _error(headers, 401, "unauthorized: invalid or missing API key", "authentication_error",
                      {"WWW-Authenticate": 'Basic realm="llama-swap"'})

    def handle(self, method: str, path: str, query: dict[str, str], headers: dict[str, str], raw: bytes) -> Reply:
        if method == "GET" and path in self.public_paths:
            return Reply(200, b"OK", "text/plain; charset=utf-8")
        if method == "GET" and path in ("/v1/models", "/models"):
            return json_reply(self.models())
        if method == "GET" and path == "/running":
            return json_reply(self.running())
        if method == "GET" and path == "/api/version":
            return json_reply({"version": VERSION, "commit": "0bdb372", "build_date": "2026-08-22"})
        if method == "GET" and path == "/metrics":
            return Reply(200, self.metrics().encode(), "text/plain; version=0.0.4; charset=utf-8")
        if path.startswith("/upstream/"):
            return self.upstream(method, path, query, headers, raw)
        if method == "POST" and path in MODEL_POSTS:
            body = parse_body(raw) or {}
            return self._dispatch(str(body.get("model") or ""), method, path, query, headers, raw, upstream=False)
        if method == "GET" and path == "/props":
            if not query.get("model"):
                return _error(headers, 400, "no model in request context", "invalid_request_error")
            return self._dispatch(query["model"], method, path, query, headers, raw, upstream=False)
        return Reply(404, b"404 page not found\n", "text/plain; charset=utf-8")

    def _cmd(self, name: str) -> str:
        args = self.sim.args(name)
        return " ".join(shlex.quote(a) for a in ["llama-server", *args[1:]])

    def models(self) -> dict[str, Any]:
        created = int(self.sim.clock.wall())
        data = []
        for spec in self.sim.scenario.models:
            loaded = self.sim.status(spec.name) in ("loading", "loaded", "sleeping", "unloading")
            data.append({"id": spec.name, "object": "model", "created": created, "owned_by": "llama-swap",
                         "meta": {"llamaswap": {"type": "model"}}, "status": {"value": "loaded" if loaded
                                                                              else "unloaded"}})
        return {"object": "list", "data": sorted(data, key=lambda d: d["id"])}

    def running(self) -> dict[str, Any]:
        rows = []
        ttl = int(self.sim.scenario.ttl_s or 0)
        for name, c in sorted(self.sim.children.items()):
            st = self.sim.status(name)
            if st not in _STATE:
                continue
            rows.append({"model": name, "state": _STATE[st], "cmd": self._cmd(name),
                         "proxy": f"http://localhost:{c.port}", "ttl": ttl, "name": "", "description": ""})
        return {"running": rows}

    def metrics(self) -> str:
        """Host gauges only, as llama-swap's perf monitor writes them (no token or model series)."""
        import psutil

        vm = psutil.virtual_memory()
        lines = ["# HELP llamaswap_memory_total_bytes Total memory in bytes",
                 "# TYPE llamaswap_memory_total_bytes gauge", f"llamaswap_memory_total_bytes {vm.total}",
                 "# HELP llamaswap_memory_used_bytes Used memory in bytes",
                 "# TYPE llamaswap_memory_used_bytes gauge", f"llamaswap_memory_used_bytes {vm.used}"]
        return "\n".join(lines) + "\n"

    def _dispatch(self, name: str, method: str, path: str, query: dict[str, str], headers: dict[str, str],
                  raw: bytes, *, upstream: bool) -> Reply:
        if self.sim.scenario.spec(name) is None:
            return _error(headers, 404, "model not found", "invalid_request_error")
        now = self.sim.clock.now()
        if not self.sim.running(name, now):
            if upstream:
                self.sim.upstream_starts.append(name)
            if not self.sim.spawn_and_wait(name, now):
                return _error(headers, 502, f"[{name}] upstream command exited prematurely", "server_error")
        elif self.sim.status(name, now) == "loading":
            self.sim.clock.sleep_until(self.sim.children[name].ready_at, self.sim.stopping)
        self.sim.touch(name, self.sim.clock.now())
        reply = self.sim.children[name].server.answer(method, path, query, headers, raw)
        return reply if reply is not None else _error(headers, 503, f"[{name}] process is not ready", "server_error")

    def upstream(self, method: str, path: str, query: dict[str, str], headers: dict[str, str], raw: bytes) -> Reply:
        rest = path[len("/upstream/"):]
        names = sorted((m.name for m in self.sim.scenario.models), key=len, reverse=True)
        name = next((n for n in names if rest == n or rest.startswith(n + "/")), None)
        if name is None:
            return _error(headers, 404, "model not found", "invalid_request_error")
        sub = rest[len(name):] or "/"
        return self._dispatch(name, method, sub, query, headers, raw, upstream=True)

