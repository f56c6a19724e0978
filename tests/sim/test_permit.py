"""The device doubles refuse to run unless a demo or a test asked for them."""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import sys
from kvmon.sim.permit import DoublesRefused
{make}
try:
    {double}
except DoublesRefused as exc:
    print("refused:", exc)
    sys.exit(3)
print("made")
"""


def _run(make: str, double: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CHILD.format(make=make, double=double)], capture_output=True,
                          text=True, timeout=120)


def test_a_fake_gpu_or_host_made_outside_the_demo_and_tests_is_refused() -> None:
    for double in ("__import__('kvmon.sim.fake_nvml').sim.fake_nvml.FakeNvml([])",
                   "__import__('kvmon.sim.devices').sim.devices.SimHost(None)",
                   "__import__('kvmon.sim.devices').sim.devices.SimUnifiedMemory(None)"):
        out = _run("", double)
        assert out.returncode == 3, out.stderr
        assert "a test double" in out.stdout and "kvmon --demo" in out.stdout


def test_the_simulator_asks_for_them() -> None:
    out = _run("from kvmon.sim.server import SimServer\nSimServer('seed-3090x2')",
               "__import__('kvmon.sim.fake_nvml').sim.fake_nvml.FakeNvml([])")
    assert out.returncode == 0 and out.stdout.strip() == "made", out.stderr


def test_every_demo_scenario_runs_where_no_test_asked_for_the_doubles() -> None:
    """The tests allow the doubles in their own process; ``kvmon once --demo S`` in a process of its own (as a user
    runs it) must get them from the simulator it starts, for every scenario (the router's and llama-swap's too)."""
    import json

    from kvmon.sim.catalog import names

    for scenario in names():
        out = subprocess.run([sys.executable, "-m", "kvmon", "once", "--demo", scenario, "--start-at", "30",
                              "--json"], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and "test double" not in out.stderr, (scenario, out.stderr[-600:])
        assert json.loads(out.stdout)["connection"]["status"]
