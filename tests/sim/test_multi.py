"""The simulated router answers as the real one does: a plain GET loads a model, and its event stream has the real
shape."""

from __future__ import annotations

import json

import httpx

from kvmon.sim.multi import MultiSim


def test_a_plain_get_loads_a_model_in_the_simulator_as_in_the_real_router(router: MultiSim) -> None:
    """The trap kvmon avoids is real in the simulator too: without autoload=false a GET loads the model."""
    url = router.url
    r = httpx.get(f"{url}/metrics?model=gpt-oss-20b&autoload=false", timeout=5)
    assert (r.status_code, r.json()["error"]["message"]) == (400, "model is not loaded")
    assert httpx.get(f"{url}/metrics", timeout=5).json()["error"]["message"] == \
        "model name is missing from the request"
    assert httpx.get(f"{url}/slots?model=nope", timeout=5).json()["error"]["message"] == "model 'nope' not found"
    router.clock.start()
    r = httpx.get(f"{url}/props?model=gpt-oss-20b", timeout=20)  # autoload: waits for the load
    assert r.status_code == 200 and router.autoloads == ["gpt-oss-20b"]
    models = {m["id"]: m for m in httpx.get(f"{url}/models", timeout=5).json()["data"]}
    assert models["gpt-oss-20b"]["status"]["value"] == "loaded" and "meta" in models["gpt-oss-20b"]
    assert httpx.post(f"{url}/models/load", json={"model": "gpt-oss-20b"}, timeout=5).json()["error"]["message"] \
        == "model is already running"
    assert httpx.post(f"{url}/models/load", json={"model": "nope"}, timeout=5).status_code == 404
    assert httpx.post(f"{url}/models/unload", json={"model": "gpt-oss-20b"}, timeout=5).json() == {"success": True}


def test_the_simulated_router_event_stream_has_the_real_shape(router: MultiSim) -> None:
    lines: list[str] = []
    with httpx.stream("GET", f"{router.url}/models/sse", timeout=5) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        router.clock.advance(3.0)
        router.tick()
        for line in resp.iter_lines():
            if line:
                lines.append(line)
            if len(lines) >= 2:
                break
    events = [json.loads(line[len("data: "):]) for line in lines]
    assert events[0] == {"model": "qwen3-8b", "event": "model_status", "data": {"status": "loading"}}
    assert events[1]["event"] == "status_change" and events[1]["data"]["status"] == "loading"
    assert set(events[1]["data"]["progress"]) == {"stages", "current", "value"}
