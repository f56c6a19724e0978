"""Intel GPUs from sysfs: an Arc card from the table and its switch link, the server's share from xe fdinfo, and no
card."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from repo_paths import FIXTURES

from kvmon.core.readings import GpuSetReading
from kvmon.physics.gpus import GB, GIB
from kvmon.sources.intel_gpu import IntelGpuSource

FIX = FIXTURES / "sysfs"


SERVER_PID = 424242  # a pid of the fixture's proc/ tree, not of this machine


def _root(tmp_path: Path, card: str, *, ids: bool = False) -> Path:
    root = tmp_path / card
    shutil.copytree(FIX / card, root, symlinks=True)
    if ids:
        (root / "usr" / "share" / "libdrm").mkdir(parents=True)
        shutil.copy(FIX / "libdrm" / "amdgpu.ids", root / "usr" / "share" / "libdrm" / "amdgpu.ids")
    return root


def _server_fdinfo(root: Path, slot: str, text: str, *, fd: int = 5) -> None:
    """The model server's open render node, as /proc shows it: an fd link and its fdinfo."""
    proc = root / "proc" / str(SERVER_PID)
    (proc / "fd").mkdir(parents=True, exist_ok=True)
    (proc / "fdinfo").mkdir(parents=True, exist_ok=True)
    os.symlink("/dev/dri/renderD128", proc / "fd" / str(fd))
    (proc / "fdinfo" / str(fd)).write_text(text)


def _one(reading: GpuSetReading):  # type: ignore[no-untyped-def]
    assert reading.unavailable_reason is None
    (g,) = reading.gpus
    return g


@pytest.mark.parametrize(("card", "driver", "slot"), [("b580", "xe", "0000:09:00.0"), ("a380-xe", "xe", "0000:08:00.0"),
                                                      ("a380-i915", "i915", "0000:0b:00.0")])
def test_intel_arc_from_the_table_and_the_switch_link(tmp_path: Path, card: str, driver: str, slot: str) -> None:
    g = _one(IntelGpuSource(_root(tmp_path, card)).poll())
    assert (g.vendor, g.source, g.kind, g.pci_bus_id) == ("intel", driver, "discrete_gpu", slot)
    assert g.bandwidth_source == "table" and g.vram_used_bytes is None and "CAP_PERFMON" in g.reasons["vram_used_bytes"]
    assert g.pcie.bandwidth_bytes_per_s is None and "switch" in g.reasons["pcie.bandwidth_bytes_per_s"]
    if card == "b580":
        assert g.name == "Intel Arc B580" and g.peak_bandwidth_bytes_per_s == 456 * GB
        assert g.vram_total_bytes == 12 * GIB and "table" in g.reasons["vram_total_bytes"]
    else:
        assert g.name == "Intel Arc A380" and g.peak_bandwidth_bytes_per_s == 186 * GB


def test_intel_server_share_from_xe_fdinfo_and_a_vram_size_file(tmp_path: Path) -> None:
    root = _root(tmp_path, "b580")
    tile = root / "sys" / "class" / "drm" / "card1" / "device" / "tile0"
    tile.mkdir()
    (tile / "physical_vram_size_bytes").write_text("12884901888\n")  # the drm-xe tree's file (decimal bytes)
    _server_fdinfo(root, "0000:09:00.0", "drm-driver:\txe\ndrm-pdev:\t0000:09:00.0\ndrm-client-id:\t4\n"
                                         "drm-total-vram0:\t1048576 KiB\ndrm-total-system0:\t4096 KiB\n")
    g = _one(IntelGpuSource(root, include_child_processes=False).poll([SERVER_PID]))
    assert g.vram_total_bytes == 12884901888 and "vram_total_bytes" not in g.reasons
    assert g.server_used_bytes == 1024**3


def test_no_intel_card(tmp_path: Path) -> None:
    assert IntelGpuSource(_root(tmp_path, "rx6900xt")).poll().unavailable_reason == "no Intel Arc GPU"
