"""``kvmon screenshot`` is honest: a server it cannot read is not pictured (exit 2, the same one line as ``kvmon
once``), ``--after`` is seconds of the session (simulated with ``--demo``, passing at ``--speed``), and Qt's notes
about what a headless platform cannot do are not printed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _closed_port_url() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


def _kvmon(*argv: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "QT_QPA_PLATFORM": "offscreen"}
    return subprocess.run([sys.executable, "-m", "kvmon", *argv], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=ROOT)


def test_no_server_exits_2_with_the_line_once_says(tmp_path: Path) -> None:
    url = _closed_port_url()
    shot = _kvmon("screenshot", url, "--after", "1", "-o", str(tmp_path / "x.png"))
    once = _kvmon("once", url)
    assert shot.returncode == 2 == once.returncode and not (tmp_path / "x.png").exists()
    assert shot.stderr == once.stderr and shot.stderr.count("\n") == 1
    assert shot.stderr.startswith(f"kvmon: Cannot connect to {url}") and "kvmon once --list" in shot.stderr


def test_after_is_simulated_seconds_at_the_demos_speed_and_qt_notes_are_quiet(tmp_path: Path) -> None:
    """60 simulated seconds at --speed 20: three real seconds or so, not a minute; the picture is 20 s into the
    story's spill, and stderr holds none of the headless platform's notes."""
    out = tmp_path / "spill.png"
    r = _kvmon("screenshot", "--demo", "spill-4090", "--start-at", "340", "--speed", "20", "--after", "60", "-o",
               str(out), timeout=60.0)
    assert r.returncode == 0, r.stderr[-2000:]
    assert out.exists() and out.stat().st_size > 10_000
    assert "does not support" not in r.stderr and r.stderr.strip() == "", r.stderr


@pytest.mark.parametrize("bad", [["--speed", "0"], ["--speed", "fast"], ["--start-at", "-3"], ["--after", "-1"]])
def test_bad_demo_options_are_usage_errors(bad: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from kvmon.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["screenshot", "--demo", "vllm", "-o", "x.png", *bad])
    assert exc.value.code == 2 and bad[0] in capsys.readouterr().err
