"""``kvmon sim``: starts the simulator, prints its URL, serves until stopped; bad options exit 2."""

from __future__ import annotations

import argparse
import threading

import httpx
import pytest

from kvmon.cli import sim as cli


def _args(**kw: object) -> argparse.Namespace:
    base: dict[str, object] = {"scenario": "seed-3090x2", "port": 0, "host": "127.0.0.1", "speed": 1.0, "fault": []}
    base.update(kw)
    return argparse.Namespace(**base)


def test_run_prints_the_url_and_serves_until_stopped(capsys: pytest.CaptureFixture[str]) -> None:
    ready, stop = threading.Event(), threading.Event()
    result: list[int] = []
    t = threading.Thread(target=lambda: result.append(cli.run(_args(speed=10.0, fault=["hang:1@999"]),
                                                              ready=ready, stop=stop)), daemon=True)
    t.start()
    assert ready.wait(10)
    out = capsys.readouterr().out
    url = next(w for w in out.split() if w.startswith("http://127.0.0.1:"))
    assert httpx.get(url + "/health").json() == {"status": "ok"}
    assert "hang:1@999" in out and "seed-3090x2" in out
    stop.set()
    t.join(5)
    assert result == [0]
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/health", timeout=1.0)


@pytest.mark.parametrize("kw", [{"fault": ["explode"]}, {"scenario": "nope"}, {"speed": 0.0}])
def test_bad_options_exit_2_with_one_line(kw: dict[str, object], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run(_args(**kw)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kvmon sim: ") and "\n" not in err


def test_fault_list_explains_syntax_and_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run(_args(fault=["list"])) == 0
    out = capsys.readouterr().out
    for word in ("seed-3090x2", "spill-4090", "ollama-partial", "restart[:L]@T", "hang:N[@T]", "drip[:B][@T]"):
        assert word in out


def test_port_in_use_is_a_clean_error(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        assert cli.run(_args(port=port)) == 2
    assert "cannot listen" in capsys.readouterr().err


def test_kvmon_sim_subcommand_is_wired() -> None:
    from kvmon.cli import main

    assert main(["sim", "--fault", "list"]) == 0


@pytest.mark.parametrize("columns", [60, 100, 160])
@pytest.mark.parametrize("argv", [["--demo", "--help"], ["sim", "--help"], ["--help"], ["once", "--help"],
                                  ["screenshot", "--help"]])
def test_help_lists_every_scenario_in_full(argv: list[str], columns: int, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Every scenario, the router and llama-swap ones too, with its whole description wrapped to the terminal's
    width: nothing cut with "…"."""
    from kvmon.cli import main
    from kvmon.sim.catalog import descriptions

    monkeypatch.setenv("COLUMNS", str(columns))
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 0
    listed = capsys.readouterr().out.split("scenarios:\n", 1)[1]
    assert "…" not in listed
    assert all(len(line) <= columns for line in listed.splitlines()), max(listed.splitlines(), key=len)
    words = " ".join(listed.split())
    for name, text in descriptions().items():
        assert f"{name} {' '.join(text.split())}" in words, name
    assert {"router", "llama-swap"} <= set(descriptions())


def test_an_unknown_scenario_is_refused_with_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    from kvmon.cli import main
    from kvmon.sim.catalog import names

    for argv in (["--demo", "nope"], ["screenshot", "--demo", "nope", "-o", "x.png"], ["once", "--demo", "nope"],
                 ["sim", "--scenario", "nope"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert "unknown scenario 'nope'" in err and "\n" not in err, (argv, err)
        assert all(n in err for n in names()), (argv, err)


@pytest.mark.parametrize("argv", [["once", "--demo", "vllm", "--start-at", "-5"], ["sim", "--start-at", "-1"],
                                  ["screenshot", "--demo", "--start-at", "-0.5", "-o", "x.png"],
                                  ["once", "--demo", "vllm", "--after", "nan"],
                                  ["once", "--demo", "vllm", "--start-at", "soon"]])
def test_a_negative_or_unreadable_time_is_a_usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from kvmon.cli import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--start-at" in err or "--after" in err
    assert "seconds" in err


def test_help_is_not_made_on_a_normal_start() -> None:
    import subprocess
    import sys

    code = ("import sys; from kvmon.cli import build_parser; build_parser().parse_args(['--demo']); "
            "assert 'kvmon.sim.scenarios' not in sys.modules, 'the scenario list loaded without --help'")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize(("scenario", "path", "key"), [("router", "/props", "role"), ("llama-swap", "/running",
                                                                                      "running")])
def test_the_router_and_llama_swap_run_alone(scenario: str, path: str, key: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    ready, stop = threading.Event(), threading.Event()
    result: list[int] = []
    t = threading.Thread(target=lambda: result.append(cli.run(_args(scenario=scenario, speed=5.0), ready=ready,
                                                              stop=stop)), daemon=True)
    t.start()
    try:
        assert ready.wait(10)
        out = capsys.readouterr().out
        url = next(w for w in out.split() if w.startswith("http://127.0.0.1:"))
        assert key in httpx.get(url + path, timeout=5).json()
        assert scenario in out
    finally:
        stop.set()
        t.join(5)
    assert result == [0]


@pytest.mark.parametrize(("scenario", "kind", "log_name"), [("seed-3090x2", "discrete_gpu", "CUDA0"),
                                                            ("apple-m2max", "unified_memory", "MTL0")])
def test_kvmon_url_with_the_sims_log_alone_gets_a_ceiling(scenario: str, kind: str, log_name: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """`kvmon sim` prints its server log; `kvmon once URL --log FILE` on a machine whose device sources read none of
    the simulated devices gets them, their bandwidth and so the ceiling from that log alone."""
    import contextlib
    import io
    import json

    from kvmon.cli import main

    ready, stop = threading.Event(), threading.Event()
    t = threading.Thread(target=lambda: cli.run(_args(scenario=scenario, speed=20.0, start_at=60.0), ready=ready,
                                                stop=stop), daemon=True)
    t.start()
    try:
        assert ready.wait(10)
        out = capsys.readouterr().out
        url = next(w for w in out.split() if w.startswith("http://127.0.0.1:"))
        log = out.split("server log (kvmon --log): ", 1)[1].split()[0]
        doc_out = io.StringIO()
        with contextlib.redirect_stdout(doc_out):
            rc = main(["once", url, "--log", log, "--json", "--interval", "0.5"])
    finally:
        stop.set()
        t.join(5)
    assert rc == 0
    doc = json.loads(doc_out.getvalue())
    named = [g for g in doc["gpus"] if g["log_name"] == log_name]
    assert named and named[0]["kind"] == kind and named[0]["peak_bandwidth_bytes_per_s"]
    assert doc["ceiling_tok_s"] and doc["ceiling_tok_s"] > 0
