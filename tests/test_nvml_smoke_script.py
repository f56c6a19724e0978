"""bench/gpu_smoke.py runs on a machine without a GPU (exit 0, says so) and its checks pass on the fake NVML."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "gpu_smoke.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120,
                          cwd=SCRIPT.parent)


def test_without_a_gpu_it_says_so_and_exits_0() -> None:
    from kvmon.sources.nvml import NvmlSource

    if NvmlSource().poll().unavailable_reason is None:
        pytest.skip("a real NVIDIA GPU is present: the full run is the bench, not a unit test")
    out = _run()
    assert out.returncode == 0, out.stderr
    assert "no NVIDIA GPU" in out.stdout and "Nothing to check" in out.stdout


def test_dry_run_on_the_fake_prints_json_and_passes() -> None:
    out = _run("--fake", "--no-load", "--no-host")
    assert out.returncode == 0, out.stdout + out.stderr
    document = out.stdout[: out.stdout.index("\ndriver ")]
    reading = json.loads(document)
    assert [g["name"] for g in reading["gpus"]] == ["NVIDIA GeForce RTX 4090", "NVIDIA H200"]
    assert "0 check(s) failed" in out.stdout and "[FAIL]" not in out.stdout
    assert "NVML peak within 10% of the table (H200: 4800 GB/s; off by +2.4%)" in out.stdout
