"""Every command that runs the demo takes the same ``--speed X`` and ``--start-at T`` in simulated seconds, and the
help says each scenario's key moments so a user can jump to them."""

from __future__ import annotations

import contextlib
import io

import pytest

from kvmon.cli import build_parser, main


@pytest.mark.parametrize("argv", [["--demo", "spill-4090"], ["once", "--demo", "spill-4090"],
                                  ["screenshot", "--demo", "spill-4090", "-o", "x.png"]])
def test_speed_and_start_at_everywhere_the_demo_runs(argv: list[str]) -> None:
    args = build_parser().parse_args([*argv, "--speed", "10", "--start-at", "300"])
    assert (args.speed, args.start_at, args.demo) == (10.0, 300.0, "spill-4090")


def test_once_takes_them_too_and_a_real_server_refuses_them() -> None:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert main(["once", "--demo", "spill-4090", "--speed", "10", "--start-at", "360"]) == 0
        assert main(["once", "http://127.0.0.1:9", "--speed", "10"]) == 2
    assert out.getvalue().startswith("Spilled: ")
    assert err.getvalue().strip() == ("kvmon: --start-at, --after and --speed are for --demo (a real server is read as "
                                      "it is now)")


@pytest.mark.parametrize("argv", [["--demo", "--help"], ["sim", "--help"], ["once", "--help"],
                                  ["screenshot", "--help"]])
def test_help_says_each_scenarios_key_moments(argv: list[str], capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from kvmon.sim.catalog import key_moments

    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit):
        main(argv)
    out = capsys.readouterr().out
    assert "100\u00a0s decoding in VRAM" in out  # a time never broken from its unit at a line's end
    text = " ".join(out.split())
    spill = [m.at_s for m in key_moments("spill-4090")]
    assert spill == [100.0, 260.0, 310.0, 360.0]
    assert ("Key moments: 100 s decoding in VRAM, 260 s VRAM running out, 310 s VRAM and context full, 360 s spilled "
            "after the reload") in text
    assert "Key moments are in simulated seconds: --start-at T joins a scenario there" in text
    if argv[0] != "sim":
        assert "simulated seconds with --demo" in text or argv == ["--demo", "--help"]
