"""The Apple Silicon device source against recorded sysctl and vm_stat outputs of real Macs (tests/fixtures/apple)."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace

import pytest
from repo_paths import FIXTURES

from kvmon.physics.gpus import GB, GIB
from kvmon.sources.apple import AppleSource, parse_sysctl, parse_vm_stat, vm_memory_bytes

FIX = FIXTURES / "apple"


def _recorded(sysctl: str, vm_stat: str | None = "vm_stat-01-m5pro-48gb-macos26.txt", *, wired_mb: int = 0,
              ioreg: str | None = None):  # type: ignore[no-untyped-def]
    """A command runner that answers from recorded outputs (a test double for macOS's tools)."""
    asked: list[list[str]] = []

    def run(argv: Sequence[str]) -> str | None:
        asked.append(list(argv))
        if argv[:2] == ["sysctl", "iogpu.wired_limit_mb"]:
            return f"iogpu.wired_limit_mb: {wired_mb}\n"
        if argv[0] == "sysctl":
            return (FIX / sysctl).read_text()
        if argv[0] == "vm_stat":
            return (FIX / vm_stat).read_text() if vm_stat else None
        if argv[0] == "ioreg":
            return ioreg
        return None

    run.asked = asked  # type: ignore[attr-defined]
    return run


class FakeMetal:
    """Stands in for pyobjc's Metal module: one device with a working-set limit (a test double)."""

    def __init__(self, working_set: int) -> None:
        self.working_set = working_set

    def MTLCreateSystemDefaultDevice(self) -> SimpleNamespace:  # Metal's own name
        return SimpleNamespace(recommendedMaxWorkingSetSize=lambda: self.working_set)


def _device(run, metal=None):  # type: ignore[no-untyped-def]
    r = AppleSource(run=run, metal=metal, platform="darwin").poll()
    assert r.unavailable_reason is None
    (g,) = r.gpus
    return g


def test_m4_max_64_gb_with_metal() -> None:
    g = _device(_recorded("sysctl-02-m4max-64gb-macos15-archspec.txt"), FakeMetal(55_700_000_000))
    assert (g.name, g.kind, g.vendor, g.source) == ("Apple M4 Max", "unified_memory", "apple", "apple")
    assert g.vram_total_bytes == 68719476736
    # 16 cores, 12 performance: the 40-core-GPU M4 Max, 546 GB/s
    assert g.peak_bandwidth_bytes_per_s == 546 * GB and g.bandwidth_source == "table"
    assert "peak_bandwidth_bytes_per_s" not in g.reasons
    assert (g.working_set_limit_bytes, g.working_set_source) == (55_700_000_000, "metal")
    # the M5 Pro's vm_stat stands in (no recorded pair from one machine): free + inactive + speculative pages
    available = (450727 + 834393 + 135297) * 16384
    assert g.vram_free_bytes == available and g.vram_used_bytes == 68719476736 - available
    assert g.spill_used_bytes == 455034 * 16384  # pages occupied by the compressor
    assert g.server_used_bytes is None and "macOS" in g.reasons["server_used_bytes"]


def test_binned_m3_max_and_the_estimated_working_set() -> None:
    g = _device(_recorded("sysctl-03-m3max-36gb-14core-macos15-archspec.txt"))
    assert g.name == "Apple M3 Max" and g.peak_bandwidth_bytes_per_s == 300 * GB  # 14 cores: the smaller bin
    assert g.vram_total_bytes == 36 * GIB
    assert g.working_set_source == "estimated" and g.working_set_limit_bytes == int(36 * GIB * 2 / 3)
    why = g.reasons["working_set_limit_bytes"]
    assert "estimated" in why and "pyobjc-framework-Metal" in why


def test_the_wired_limit_override_stands_in_for_metal() -> None:
    g = _device(_recorded("sysctl-01-m5-24gb-macos26-archspec.txt", wired_mb=20000))
    assert g.name == "Apple M5" and g.peak_bandwidth_bytes_per_s == 153 * GB and g.vram_total_bytes == 24 * GIB
    assert (g.working_set_limit_bytes, g.working_set_source) == (20000 * 1024**2, "sysctl")


def test_gpu_core_count_from_ioreg_picks_a_bin() -> None:
    run = _recorded("sysctl-02-m4max-64gb-macos15-archspec.txt", ioreg='  | |   "gpu-core-count" = 32\n')
    assert _device(run).peak_bandwidth_bytes_per_s == 410 * GB


def test_m1_pro_without_memsize_or_vm_stat() -> None:
    # cpufetch #139's `sysctl -a` excerpt has no hw.memsize and no brand string: nothing is guessed
    r = AppleSource(run=_recorded("sysctl-05-m1pro-sysctl-a-cpufetch-issue139.txt", None), metal=None,
                    platform="darwin").poll()
    assert r.gpus == () and "no Apple Silicon" in (r.unavailable_reason or "")


def test_not_a_mac() -> None:
    run = _recorded("sysctl-02-m4max-64gb-macos15-archspec.txt")
    r = AppleSource(run=run, metal=None, platform="linux").poll()
    assert r.gpus == () and r.unavailable_reason == "no Apple Silicon (not macOS)"
    assert run.asked == []  # nothing is run on another system


def test_static_facts_are_read_once_a_minute() -> None:
    now = [0.0]
    run = _recorded("sysctl-02-m4max-64gb-macos15-archspec.txt")
    src = AppleSource(run=run, metal=None, platform="darwin", clock=lambda: now[0])
    for _ in range(5):
        src.poll()
    assert sum(a[0] == "sysctl" for a in run.asked) == 2  # the chip and the wired limit, once
    assert sum(a[0] == "vm_stat" for a in run.asked) == 5  # memory in use: every poll
    now[0] = 61.0
    src.poll()
    assert sum(a[0] == "sysctl" for a in run.asked) == 4


def test_parsers() -> None:
    values = parse_sysctl((FIX / "sysctl-02-m4max-64gb-macos15-archspec.txt").read_text())
    assert values["machdep.cpu.brand_string"] == "Apple M4 Max" and values["hw.perflevel0.physicalcpu"] == "12"
    assert values["hw.memsize"] == "68719476736" and values["hw.pagesize"] == "16384"
    page, counts = parse_vm_stat((FIX / "vm_stat-02-headers-and-intel-contrast.txt").read_text())
    assert page == 4096 and counts["Pages free"] == 6127229 and counts["Translation faults"] == 11477162
    assert vm_memory_bytes(4096, counts) == ((6127229 + 628646 + 430715) * 4096, 0)
    assert vm_memory_bytes(None, counts) == (None, None)


@pytest.mark.parametrize("broken", ["", "garbage\n", "hw.memsize: lots\nmachdep.cpu.brand_string: Apple M2 Max\n"])
def test_odd_sysctl_output_gives_unknowns_not_errors(broken: str) -> None:
    r = AppleSource(run=lambda argv: broken, metal=None, platform="darwin").poll()
    if r.gpus:
        (g,) = r.gpus
        assert g.name == "Apple M2 Max" and g.vram_total_bytes is None and g.working_set_limit_bytes is None
        assert g.peak_bandwidth_bytes_per_s == 400 * GB
    else:
        assert "no Apple Silicon" in (r.unavailable_reason or "")
