"""llama-server router mode against the captured answers of a real router (``fixtures/llama-router``): detection,
the model list in every state, load progress from ``/models/sse``, the per-model source that never loads a model,
and the errors a router gives."""

from __future__ import annotations

import json

import pytest
from helpers_http import LLAMA_FIXTURES, FixtureServer, read_capture, wait_until
from repo_paths import FIXTURES

from kvmon.app.group_monitor import GroupMonitor
from kvmon.core import serving
from kvmon.core.readings import SourceError
from kvmon.sources import backends
from kvmon.sources.detect import detect_backend, open_source
from kvmon.sources.llamacpp.source import LlamaServerSource
from kvmon.sources.router.progress import ProgressStream
from kvmon.sources.router.source import LlamaRouterSource, parse_models, progress_of

ROUTER = FIXTURES / "llama-router"
MODEL = "tiny-llama-F32"
Q = f"?model={MODEL}&autoload=false"


def _body(name: str) -> str:
    return (ROUTER / name).read_text(encoding="utf-8")


def _serve(server: FixtureServer, path: str, name: str) -> None:
    status_file = ROUTER / (name + ".status")
    status = int(status_file.read_text()) if status_file.exists() else 200
    server.set(path, status, _body(name), {"Content-Type": "application/json", "Server": "llama.cpp"})


def _router(server: FixtureServer, models: str = "models.unloaded.json") -> None:
    _serve(server, "/props", "props.router.json")
    _serve(server, "/models", models)
    _serve(server, "/metrics", "metrics.no-model.json")
    server.set("/health", 200, '{"status":"ok"}')


def test_the_captured_model_list_in_every_state() -> None:
    for name, status, port in (("models.unloaded.json", serving.UNLOADED, "0"),
                               ("models.loaded.json", serving.LOADED, "57971"),
                               ("models.sleeping.json", serving.SLEEPING, "57971"),
                               ("models.failed.json", serving.FAILED, "47981")):
        models, notes = parse_models(json.loads(_body(name)))
        assert notes == [] and len(models) == 1
        m = models[0]
        assert m.status == status, name
        assert m.args[0].endswith("llama-server") and m.args[m.args.index("--port") + 1] == port
    failed = parse_models(json.loads(_body("models.failed.json")))[0][0]
    assert (failed.name, failed.exit_code) == ("broken-model", 1)
    assert serving.status_word(failed) == "failed (exit 1)"
    assert parse_models({"data": "nope"}) == ([], ["/models has no data list"])
    assert parse_models({"data": [{"status": {}}, 3]})[1] == ["an entry without an id", "an entry without an id"]


def test_progress_comes_from_the_captured_event_stream() -> None:
    follower = ProgressStream("http://unused")
    seen: list[tuple[str | None, float | None]] = []
    for line in _body("models-sse.txt").splitlines():
        follower.feed(line)
        if line.startswith("data:"):
            seen.append(progress_of(json.loads(line[5:])))
    assert seen[:3] == [("loading", None), ("loading", 0.0), ("loading", 1.0)]
    assert ("sleeping", None) in seen and seen[-1] == ("unloaded", None)
    latest = follower.latest()
    assert set(latest) == {MODEL, "broken-model"}
    assert progress_of(latest["broken-model"][1]) == ("unloaded", None)
    follower.feed("data: not json")  # ignored, like a comment or an event: line
    follower.feed(": keep-alive")
    assert set(follower.latest()) == {MODEL, "broken-model"}


def test_a_router_is_detected_by_its_props_and_opened_as_one(fixture_server: FixtureServer) -> None:
    _router(fixture_server)
    assert detect_backend(fixture_server.url, None, 1.0) == backends.ROUTER
    src = open_source(fixture_server.url, timeout_s=1.0)
    try:
        assert isinstance(src, LlamaRouterSource)
    finally:
        src.close()


def test_a_plain_source_pointed_at_a_router_says_so(fixture_server: FixtureServer) -> None:
    _router(fixture_server)
    src = LlamaServerSource(fixture_server.url, timeout_s=1.0, inspect_local_process=False)
    try:
        with pytest.raises(SourceError) as e:
            src.poll()
    finally:
        src.close()
    assert "router" in e.value.failure.reason


def test_a_router_with_nothing_loaded_says_so_and_loads_nothing(fixture_server: FixtureServer) -> None:
    _router(fixture_server)
    mon = GroupMonitor(LlamaRouterSource(fixture_server.url, timeout_s=1.0))
    try:
        snap = mon.poll()
    finally:
        mon.close()
    assert snap.server_read and snap.serving is not None and snap.serving.followed is None
    assert snap.serving.message == \
        "llama-server router: no model loaded (1 available; it loads one on the first request)"
    assert snap.server_version == "b1-0c1e570" and snap.model.name is None
    asked = fixture_server.paths_requested()
    assert not any("model=" in p for p in asked), asked  # no per-model request on a model that is not running


def test_a_loaded_model_is_read_through_the_router_with_autoload_off(fixture_server: FixtureServer) -> None:
    _router(fixture_server, "models.loaded.json")
    _status, props, headers = read_capture("props.idle.json")  # a real b11549 server's own /props
    doc = json.loads(props)
    doc.update({"model_alias": MODEL, "model_path": "/tmp/rt/models/tiny-llama-F32.gguf", "total_slots": 2,
                "is_sleeping": False})
    doc["default_generation_settings"]["n_ctx"] = 2048
    fixture_server.set("/props" + Q, 200, json.dumps(doc), headers)
    _serve(fixture_server, "/slots" + Q, "slots.model-idle.json")
    fixture_server.set("/metrics" + Q, *read_capture("metrics.idle.txt")[:2])
    _serve(fixture_server, "/v1/models", "models.loaded.json")
    mon = GroupMonitor(LlamaRouterSource(fixture_server.url, timeout_s=1.0))
    try:
        snap = mon.poll()
    finally:
        mon.close()
    assert snap.serving is not None and snap.serving.followed == MODEL
    assert snap.serving.follow_reason == "the only model loaded"
    assert snap.model.name == MODEL and snap.model.n_ctx == 2048 and snap.model.n_slots == 2
    per_model = [p for p in fixture_server.paths_requested() if "model=" in p]
    assert per_model and all(p.endswith("&autoload=false") for p in per_model), per_model
    served = snap.serving.models[0]
    assert (served.name, served.status, served.followed, served.processing) == (MODEL, "loaded", True, False)
    # the child's settings come from the command line the router shows (this machine has no such process)
    assert (snap.model.n_ctx_total, snap.provenance["n_ctx_total"]) == (4096, "command_line")


def test_a_sleeping_model_is_never_asked_for_slots(fixture_server: FixtureServer) -> None:
    _router(fixture_server, "models.sleeping.json")
    _status, props, headers = read_capture("props.idle.json")
    doc = json.loads(props)
    doc.update({"model_alias": MODEL, "is_sleeping": True})
    fixture_server.set("/props" + Q, 200, json.dumps(doc), headers)
    _serve(fixture_server, "/slots" + Q, "slots.model-idle.json")
    fixture_server.set("/metrics" + Q, *read_capture("metrics.idle.txt")[:2])
    mon = GroupMonitor(LlamaRouterSource(fixture_server.url, timeout_s=1.0))
    try:
        for _ in range(2):
            snap = mon.poll()
    finally:
        mon.close()
    assert snap.connection.status.value == "sleeping"
    assert snap.serving is not None and snap.serving.message == \
        "tiny-llama-F32 sleeping (idle; unloaded until the next request)"
    assert not any(p.startswith("/slots") for p in fixture_server.paths_requested())


def test_the_router_errors_are_clear(fixture_server: FixtureServer) -> None:
    _router(fixture_server)
    _serve(fixture_server, "/props" + Q, "metrics.not-loaded.json")
    src = LlamaServerSource(fixture_server.url, timeout_s=1.0, model_id=MODEL, inspect_local_process=False)
    try:
        with pytest.raises(SourceError) as e:
            src.poll()
    finally:
        src.close()
    assert "model is not loaded" in e.value.failure.reason and MODEL in e.value.failure.reason
    _serve(fixture_server, "/models", "models.no-key.json")
    _serve(fixture_server, "/props", "models.no-key.json")
    mon = GroupMonitor(LlamaRouterSource(fixture_server.url, timeout_s=1.0, api_key="wrong"))
    try:
        snap = mon.poll()
    finally:
        mon.close()
    assert snap.connection.status.value == "auth_rejected" and "wrong" not in (snap.connection.reason or "")


def test_load_progress_is_read_from_the_stream_while_a_model_loads(fixture_server: FixtureServer) -> None:
    _router(fixture_server, "models.unloaded.json")
    doc = json.loads(_body("models.unloaded.json"))
    doc["data"][0]["status"]["value"] = "loading"
    fixture_server.set("/models", 200, json.dumps(doc))
    event = {"model": MODEL, "event": "status_change",
             "data": {"status": "loading", "progress": {"stages": ["text_model"], "current": "text_model",
                                                         "value": 0.37}}}
    fixture_server.set("/models/sse", 200, f"data: {json.dumps(event)}\n\n", {"Content-Type": "text/event-stream"})
    src = LlamaRouterSource(fixture_server.url, timeout_s=1.0)
    try:
        first = src.list_models()
        assert first.models[0].status == serving.LOADING
        assert wait_until(lambda: src.list_models().models[0].progress == pytest.approx(0.37), 5.0)
        listing = src.list_models()
        assert serving.status_word(listing.models[0]) == "loading 37 %"
        fixture_server.set("/models", 200, _body("models.loaded.json"))
        assert src.list_models().models[0].progress is None  # loaded: the stream is let go
    finally:
        src.close()
    assert any(p == "/models/sse" for p in fixture_server.paths_requested())


def test_fixture_files_are_valid_json() -> None:
    for f in ROUTER.glob("*.json"):
        json.loads(f.read_text(encoding="utf-8"))
    assert (LLAMA_FIXTURES / "props.idle.json").exists()


def test_hostile_event_lines_are_dropped_and_the_stream_goes_on() -> None:
    """Deep nesting, a lone surrogate in a key or a 400-digit number in one event never stops the follower."""
    follower = ProgressStream("http://unused")
    follower.feed("data: " + "[" * 100_000 + "]" * 100_000)
    follower.feed('data: {"model": "m\\ud800", "value": {"value": "loaded"}}')
    follower.feed('data: {"model": "big", "n": ' + "9" * 400 + "}")
    latest = follower.latest()
    assert all(name.encode("utf-8") for name in latest)  # every key is valid text
    assert "big" in latest
    follower.feed('data: {"model": "after"}')
    assert "after" in follower.latest()
