"""The simulated llama-server over real HTTP: bodies shaped like the real captures, /metrics semantics."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import pytest
from helpers_http import LLAMA_FIXTURES  # tests/ is on sys.path (conftest.py)

from kvmon.sim.server import SimServer


def capture(name: str) -> object:
    return json.loads((LLAMA_FIXTURES / name).read_text(encoding="utf-8"))


def capture_headers(name: str) -> dict[str, str]:
    lines = (LLAMA_FIXTURES / f"{name}.headers.txt").read_text(encoding="utf-8").splitlines()[1:]
    return {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines if ":" in ln)}


def key_types(obj: object) -> object:
    """The shape of a JSON value: dict keys (recursively) and value types, not the values."""
    if isinstance(obj, dict):
        return {k: key_types(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [key_types(obj[0])] if obj else []
    if isinstance(obj, bool):
        return "bool"
    if isinstance(obj, (int, float)):
        return "number"
    return type(obj).__name__


@pytest.fixture
def idle_sim() -> Iterator[SimServer]:
    """A seed-3090x2 server with no scripted chat: only the test's own requests run."""
    sim = SimServer("seed-3090x2", speed=50.0, autoplay=False)
    sim.start()
    try:
        yield sim
    finally:
        sim.stop()


@pytest.fixture
def client(idle_sim: SimServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=idle_sim.url, timeout=10.0) as c:
        yield c


def test_read_endpoints_have_the_captured_keys_types_and_headers(client: httpx.Client) -> None:
    for path, cap in (("/health", "health.idle.json"), ("/props", "props.idle.json"),
                      ("/slots", "slots.idle.json"), ("/v1/models", "v1-models.idle.json"),
                      ("/models", "models.generating.json"), ("/v1/health", "v1-health.idle.json")):
        r = client.get(path)
        assert r.status_code == 200, path
        assert list(r.json().keys() if isinstance(r.json(), dict) else [0]) == \
            list(capture(cap).keys() if isinstance(capture(cap), dict) else [0]), path
        assert key_types(r.json()) == key_types(capture(cap)), path
        want = capture_headers(cap)
        for h in ("server", "access-control-allow-origin", "content-type"):
            assert r.headers.get(h) == want[h], (path, h)


def test_unknown_path_is_the_real_404(client: httpx.Client) -> None:
    r = client.get("/nope")
    assert r.status_code == 404
    assert r.json() == capture("notfound.json")


def test_metrics_text_has_every_captured_series_with_help_and_type(client: httpx.Client) -> None:
    r = client.get("/metrics")
    want = (LLAMA_FIXTURES / "metrics.idle.txt").read_text(encoding="utf-8")
    assert r.headers["content-type"] == "text/plain; version=0.0.4"
    assert int(r.headers["process-start-time-unix"]) > 0
    got_meta = [ln for ln in r.text.splitlines() if ln.startswith("#")]
    assert got_meta == [ln for ln in want.splitlines() if ln.startswith("#")]
    assert r.text == want  # idle and fresh: every value 0, same formatting


def _metric(text: str, name: str) -> float:
    for ln in text.splitlines():
        if ln.startswith(f"llamacpp:{name} "):
            return float(ln.split()[1])
    raise AssertionError(f"{name} missing")


def test_counters_move_when_a_request_ends_but_decode_calls_and_slots_move_live(idle_sim: SimServer,
                                                                               client: httpx.Client) -> None:
    idle_sim.clock.set_speed(5.0)  # ~290 tok/s simulated: a 400-token answer streams for ~1.4 s
    seen: list[tuple[float, float, int, int]] = []
    with client.stream("POST", "/completion", json={"prompt": "x" * 400, "n_predict": 400, "stream": True}) as r:
        assert r.headers["content-type"] == "text/event-stream"
        lines = r.iter_lines()
        for _ in range(3):
            m = client.get("/metrics").text
            slot = client.get("/slots").json()[0]
            seen.append((_metric(m, "tokens_predicted_total"), _metric(m, "n_decode_total"),
                         slot["next_token"][0]["n_decoded"], slot["n_prompt_tokens"]))
            time.sleep(0.15)
        events = [ln for ln in lines if ln.startswith("data: ")]
    assert all(s[0] == 0 for s in seen), "tokens_predicted_total moved before the request ended"
    assert seen[0][1] < seen[-1][1], "n_decode_total should grow live"
    assert seen[0][2] < seen[-1][2] and seen[0][3] < seen[-1][3], "n_decoded / n_prompt_tokens should grow live"
    final = json.loads(events[-1][6:])
    assert final["stop"] is True and final["timings"]["predicted_n"] == 400
    assert key_types(json.loads(events[0][6:])) == key_types(
        json.loads((LLAMA_FIXTURES / "completion.stream.sse.txt").read_text(encoding="utf-8").split("\n\n")[0][6:]))
    m = client.get("/metrics").text
    assert _metric(m, "tokens_predicted_total") == 400
    assert _metric(m, "prompt_tokens_total") == 100
    assert _metric(m, "n_decode_total") == 1 + 399  # one prompt batch, then one call per token after the first
    assert _metric(m, "tokens_predicted_seconds_total") == pytest.approx(final["timings"]["predicted_ms"] / 1000,
                                                                         rel=1e-4)
    assert _metric(m, "predicted_tokens_seconds") == pytest.approx(final["timings"]["predicted_per_second"], rel=1e-4)
    assert _metric(client.get("/metrics").text, "predicted_tokens_seconds") == 0  # that scrape took the gauge


def test_throughput_gauges_reset_at_each_scrape(client: httpx.Client) -> None:
    client.get("/metrics")
    r = client.post("/completion", json={"prompt": "y" * 80, "n_predict": 8})
    tps = r.json()["timings"]["predicted_per_second"]
    first = _metric(client.get("/metrics").text, "predicted_tokens_seconds")
    second = _metric(client.get("/metrics").text, "predicted_tokens_seconds")
    assert first == pytest.approx(tps, rel=1e-3) and second == 0


def test_completion_and_chat_bodies_match_the_captures(client: httpx.Client) -> None:
    r = client.post("/completion", json={"prompt": "The llama server measured its own speed and", "n_predict": 12})
    assert key_types(r.json()) == key_types(capture("completion.nonstream.json"))
    r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi " * 30}],
                                                  "max_tokens": 10})
    body = r.json()
    assert list(body) == list(capture("chat-completion.turn2.json"))  # type: ignore[arg-type]
    assert key_types(body) == key_types(capture("chat-completion.turn2.json"))
    assert body["usage"]["completion_tokens"] == 10 == body["timings"]["predicted_n"]


def test_chat_stream_ends_with_usage_timings_and_done(client: httpx.Client) -> None:
    want = [json.loads(ev[6:]) for ev in (LLAMA_FIXTURES / "chat-completion.stream.sse.txt")
            .read_text(encoding="utf-8").split("\n\n") if ev.startswith("data: {")]
    with client.stream("POST", "/v1/chat/completions",
                       json={"messages": [{"role": "user", "content": "go"}], "max_tokens": 6, "stream": True,
                             "stream_options": {"include_usage": True}}) as r:
        events = [ln[6:] for ln in r.iter_lines() if ln.startswith("data: ")]
    assert events[-1] == "[DONE]"
    got = [json.loads(e) for e in events[:-1]]
    assert len(got) == 1 + 6 + 2
    for g, w in ((got[0], want[0]), (got[1], want[1]), (got[-2], want[-2]), (got[-1], want[-1])):
        assert key_types(g) == key_types(w)


def test_busy_slot_and_fail_on_no_slot(idle_sim: SimServer, client: httpx.Client) -> None:
    idle_sim.clock.set_speed(1.0)
    req = idle_sim.engine.submit(50, 1000)
    assert req.t_end > idle_sim.clock.now() + 5
    r = client.get("/slots?fail_on_no_slot=1")
    assert r.status_code == 503 and r.json() == capture("slots.generating.fail_on_no_slot.json")
    slot = client.get("/slots").json()[0]
    assert key_types(slot) == key_types(capture("slots.generating.json")[0])  # type: ignore[index]
    assert slot["is_processing"] is True and slot["id_task"] == req.id_task


def test_bad_json_body_is_a_400_not_a_crash(client: httpx.Client) -> None:
    r = client.post("/completion", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == 400
    assert client.get("/health").status_code == 200


def test_a_finished_slot_looks_like_the_real_one_after_a_request(client: httpx.Client) -> None:
    r = client.post("/completion", json={"prompt": "z" * 140, "n_predict": 64}).json()
    slot = client.get("/slots").json()[0]
    want = capture("kv-q8-fa/slots.after.q8kv-fa.json")[0]  # type: ignore[index]
    assert key_types(slot) == key_types(want)
    assert slot["n_prompt_tokens"] == r["tokens_evaluated"] + r["tokens_predicted"] - 1  # as in the capture: 35+64-1
    assert (slot["is_processing"], slot["n_prompt_tokens_processed"], slot["n_prompt_tokens_cache"]) == (False, 0, 0)
    assert slot["next_token"] == want["next_token"]


def test_malformed_requests_get_http_errors_and_the_server_stays_up(idle_sim: SimServer) -> None:
    import socket

    host, port = "127.0.0.1", idle_sim.port
    for head in (b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n",
                 b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
                 b"GARBAGE\r\n\r\n"):
        with socket.create_connection((host, port), timeout=5) as s:
            s.sendall(head)
            answer = s.recv(400)
        assert b"413" in answer or b"400" in answer, answer
    assert httpx.get(idle_sim.url + "/health").status_code == 200


def test_an_internal_error_is_a_500_and_the_server_stays_up(idle_sim: SimServer, client: httpx.Client,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_a: object) -> None:
        raise RuntimeError("broken")

    monkeypatch.setattr(idle_sim.api, "handle", boom)
    r = client.get("/props")
    assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
    monkeypatch.undo()
    assert client.get("/props").status_code == 200
