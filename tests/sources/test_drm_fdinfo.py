"""A server's GPU memory from /proc/PID/fdinfo: the formats of each driver, and a process that cannot be read."""

from __future__ import annotations

from pathlib import Path

from repo_paths import FIXTURES

from kvmon.sources.drm_fdinfo import parse_fdinfo, server_gpu_memory

FIX = FIXTURES / "sysfs"


def test_fdinfo_formats() -> None:
    old = parse_fdinfo((FIX / "fdinfo" / "amdgpu-drm-memory.txt").read_text())
    assert old is not None and (old.pdev, old.client_id, old.driver) == ("0000:08:00.0", "217", "amdgpu")
    assert old.memory_bytes == {"vram": 2068 * 1024, "gtt": 8192 * 1024, "cpu": 0}
    # newer kernels (drm-usage-stats.rst): total and resident per region; the total is what is allocated
    new = parse_fdinfo("drm-driver:\tamdgpu\ndrm-pdev:\t0000:03:00.0\ndrm-client-id:\t9\n"
                       "drm-total-vram:\t3145728 KiB\ndrm-resident-vram:\t3000000 KiB\ndrm-total-gtt:\t2 MiB\n")
    assert new is not None and new.memory_bytes == {"vram": 3145728 * 1024, "gtt": 2 * 1024**2}
    # xe numbers its regions (drm-total-vram0); i915 calls VRAM "local"
    xe = parse_fdinfo("drm-driver:\txe\ndrm-pdev:\t0000:09:00.0\ndrm-client-id:\t4\ndrm-total-vram0:\t65072580 KiB\n")
    assert xe is not None and xe.memory_bytes == {"vram": 65072580 * 1024}
    assert parse_fdinfo("pos:\t0\nflags:\t02\n") is None  # not a DRM client


def test_server_gpu_memory_needs_a_readable_process(tmp_path: Path) -> None:
    assert server_gpu_memory(tmp_path, [1, 2]) is None
    (tmp_path / "7" / "fd").mkdir(parents=True)
    assert server_gpu_memory(tmp_path, [7]) == {}  # readable, and holds no GPU device
