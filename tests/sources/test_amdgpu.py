"""The AMD (amdgpu) and Intel (xe/i915) sysfs device sources against real sysfs snapshots (tests/fixtures/sysfs)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from repo_paths import FIXTURES

from kvmon.core.readings import GpuSetReading
from kvmon.physics.gpus import GB
from kvmon.sources.amdgpu import AmdGpuSource, parse_amdgpu_ids, parse_dpm_levels

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


def test_rx_6900_xt_every_memory_file_and_the_server_share(tmp_path: Path) -> None:
    root = _root(tmp_path, "rx6900xt", ids=True)
    fdinfo = (FIX / "fdinfo" / "amdgpu-drm-memory.txt").read_text().replace("0000:08:00.0", "0000:0c:00.0")
    _server_fdinfo(root, "0000:0c:00.0", fdinfo)
    _server_fdinfo(root, "0000:0c:00.0", fdinfo, fd=9)  # the same client through a second fd counts once
    g = _one(AmdGpuSource(root, include_child_processes=False).poll([SERVER_PID]))
    assert g.name == "AMD Radeon RX 6900 XT"  # libdrm's amdgpu.ids: 73BF rev C0
    assert (g.kind, g.vendor, g.source, g.vendor_index) == ("discrete_gpu", "amd", "amdgpu", 0)
    assert g.pci_device_id == "1002:73bf" and g.pci_bus_id == "0000:0c:00.0"
    assert (g.vram_total_bytes, g.vram_used_bytes) == (17163091968, 668274688)
    assert g.vram_free_bytes == 17163091968 - 668274688
    assert (g.spill_total_bytes, g.spill_used_bytes) == (16786171904, 62369792)  # GTT
    assert g.peak_bandwidth_bytes_per_s == 512 * GB and g.bandwidth_source == "table"
    assert (g.pcie.generation, g.pcie.width, g.pcie.max_generation, g.pcie.max_width) == (4, 16, 4, 16)
    assert g.pcie.bandwidth_bytes_per_s == pytest.approx(31.5e9, rel=1e-3)
    assert (g.mem_clock_mhz, g.mem_clock_max_mhz) == (1000.0, 1000.0)
    assert (g.gpu_busy_percent, g.memory_busy_percent) == (3.0, 0.0)
    # the server's client: 2068 KiB of VRAM and 8192 KiB of GTT (amdgpu_top #87's fdinfo)
    assert g.server_used_bytes == 2068 * 1024 and g.server_spill_bytes == 8192 * 1024
    assert g.other_processes_used_bytes == 668274688 - 2068 * 1024


def test_rx_6900_xt_without_libdrm_names_the_cards_its_id_may_be(tmp_path: Path) -> None:
    g = _one(AmdGpuSource(_root(tmp_path, "rx6900xt")).poll())
    # 73bf with 16 GiB: the 6800, 6800 XT or 6900 XT, all 512 GB/s: the bandwidth is known, the card is not
    assert g.name == "AMD Radeon RX 6800 / RX 6800 XT / RX 6900 XT" and g.peak_bandwidth_bytes_per_s == 512 * GB
    assert "not known" in g.reasons["server_used_bytes"]


def test_rx_7900_xtx_snapshot_without_memory_files_says_what_it_cannot_know(tmp_path: Path) -> None:
    g = _one(AmdGpuSource(_root(tmp_path, "rx7900xtx")).poll())
    assert g.pci_device_id == "1002:744c" and g.vram_total_bytes is None and g.peak_bandwidth_bytes_per_s is None
    assert "7900 XT" in g.reasons["peak_bandwidth_bytes_per_s"] and "XTX" in g.reasons["peak_bandwidth_bytes_per_s"]
    assert "mem_info_vram" in g.reasons["vram_total_bytes"]
    assert g.mem_clock_max_mhz == 1249.0 and g.mem_clock_mhz == 1249.0  # pp_dpm_mclk: "3: 1249Mhz *"


def test_apu_is_unified_memory_carve_out_plus_gtt(tmp_path: Path) -> None:
    g = _one(AmdGpuSource(_root(tmp_path, "phoenix")).poll())  # Radeon 780M
    assert g.kind == "unified_memory"
    assert g.vram_total_bytes == 4294967296 + 31433977856 and g.vram_used_bytes == 1272893440 + 211398656
    assert g.spill_total_bytes is None  # the GTT is the pool itself here, not a spill
    assert g.peak_bandwidth_bytes_per_s is None and "host's" in g.reasons["peak_bandwidth_bytes_per_s"]
    s = _one(AmdGpuSource(_root(tmp_path, "strixpoint")).poll())
    assert s.kind == "unified_memory" and s.vram_total_bytes == 536870912 + 16441004032


def test_card_not_in_the_table_has_no_bandwidth_and_says_why(tmp_path: Path) -> None:
    g = _one(AmdGpuSource(_root(tmp_path, "rx580", ids=True)).poll())
    assert g.name == "AMD Radeon RX 580 Series" and g.vram_total_bytes == 4294967296
    assert g.peak_bandwidth_bytes_per_s is None and g.bandwidth_source is None
    why = g.reasons["peak_bandwidth_bytes_per_s"]
    assert "not in kvmon's AMD table" in why and "1750 MHz" in why and "--bandwidth" in why
    assert (g.pcie.max_generation, g.pcie.max_width) == (3, 16)


def test_no_amd_card_is_said_and_not_an_error(tmp_path: Path) -> None:
    r = AmdGpuSource(_root(tmp_path, "b580")).poll()
    assert r.gpus == () and r.unavailable_reason == "no AMD GPU (no amdgpu card in sysfs)"
    assert AmdGpuSource(tmp_path / "nothing").poll().unavailable_reason is not None


def test_unreadable_server_processes_say_so(tmp_path: Path) -> None:
    root = _root(tmp_path, "rx6900xt")
    g = _one(AmdGpuSource(root, include_child_processes=False).poll([SERVER_PID]))  # no proc/ tree at all
    assert g.server_used_bytes is None and "not readable" in g.reasons["server_used_bytes"]


def test_dpm_levels_and_amdgpu_ids() -> None:
    assert parse_dpm_levels("0: 96Mhz \n1: 456Mhz *\n2: 772Mhz \n3: 1218Mhz \n") == (456.0, 1218.0)
    assert parse_dpm_levels("0: 400Mhz \n1: 800Mhz \n2: 1000Mhz ") == (None, 1000.0)  # strixpoint: no star
    assert parse_dpm_levels(None) == (None, None)
    ids = parse_amdgpu_ids((FIX / "libdrm" / "amdgpu.ids").read_text())
    assert ids[("73bf", "c1")] == "AMD Radeon RX 6800 XT" and len(ids) == 4
