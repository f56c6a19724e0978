"""The servers one window watches (no Qt): from the command line, every server found, else the demo with its
banner; short labels for the tabs; adding and removing one."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from helpers_http import FixtureServer, serve_llama_state

import kvmon.app.servers as servers_mod
from kvmon.app.demo import NO_SERVER_BANNER
from kvmon.app.servers import ServerSet, choose_servers, short_label
from kvmon.core.snapshot import ConnectionStatus
from kvmon.sources.discover import Discovery, Found


def _args(**kw: object) -> argparse.Namespace:
    base: dict[str, object] = {"url": None, "demo": None, "timeout": 1.0, "log": None, "record": None,
                               "devices": None}
    base.update(kw)
    return argparse.Namespace(**base)


def test_short_labels() -> None:
    assert short_label("http://127.0.0.1:9931", "llama-server") == "llama-server :9931"
    assert short_label("http://gpu-box:11434", "Ollama") == "Ollama gpu-box:11434"


def test_every_server_found_is_watched_the_ones_that_answer_first(fixture_server: FixtureServer,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    serve_llama_state(fixture_server, "idle")
    found = Discovery((Found("http://127.0.0.1:1", "llama-server", "process 9 (llama-server)", 9, answering=False,
                             reason="cannot connect"),
                       Found(fixture_server.url, "llama-server", "port 9931")))
    monkeypatch.setattr(servers_mod, "find_servers", lambda **kw: found)
    s = choose_servers(_args(), None)
    try:
        assert [w.key for w in s] == [fixture_server.url, "http://127.0.0.1:1"]
        assert s.first.how == "port 9931" and s.first.label.startswith("llama-server :")
        m = s.first.session.factory()  # the backend it answered as: no second question
        try:
            assert m.poll().connection.status is ConnectionStatus.CONNECTED
        finally:
            m.close()
    finally:
        s.close()


def test_nothing_found_is_the_demo_with_its_banner(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(servers_mod, "find_servers", lambda **kw: Discovery((), ("the process table",)))
    s = choose_servers(_args(), None)
    try:
        assert len(s) == 1 and s.first.session.banner == NO_SERVER_BANNER and s.first.session.sim is not None
    finally:
        s.close()


def test_a_url_given_and_one_added_then_removed(fixture_server: FixtureServer, tmp_path) -> None:  # type: ignore[no-untyped-def]
    serve_llama_state(fixture_server, "idle")
    out = tmp_path / "rec.jsonl"
    s = choose_servers(_args(url=fixture_server.url, record=str(out)), None)
    try:
        assert [w.key for w in s] == [fixture_server.url] and s.first.session.recorder.path == str(out)
        other = s.add_url("127.0.0.1:9")
        assert other.key == "http://127.0.0.1:9" and len(s) == 2 and other.key in s
        assert s.add_url("http://127.0.0.1:9") is other  # the same server once
        s.remove(other.key)
        assert len(s) == 1
    finally:
        s.close()
    assert len(s) == 0 and isinstance(s, ServerSet)  # closing the set ends every session


def test_an_unopenable_recording_is_the_recorders_problem_and_the_demo_runs(tmp_path: Path) -> None:
    pytest.importorskip("kvmon.sim.server")
    s = choose_servers(_args(demo="seed-3090x2", timeout=2.0, record=str(tmp_path / "no" / "such" / "dir.jsonl")),
                       None)
    try:
        assert s.first.session.recorder.problem is not None and "dir.jsonl" in s.first.session.recorder.problem
        assert s.first.session.recorder.path is None
    finally:
        s.close()
