"""The device sources together: every device numbered, and the others kept when one source fails."""

from __future__ import annotations

from repo_paths import FIXTURES

from kvmon.core.readings import GpuSetReading
from kvmon.sources.amdgpu import AmdGpuSource
from kvmon.sources.devices import DeviceSources
from kvmon.sources.intel_gpu import IntelGpuSource


def test_device_sources_number_all_devices_and_keep_the_other_sources_when_one_fails() -> None:
    fixtures = FIXTURES / "sysfs"

    class Broken:
        def poll(self, server_pids: object = ()) -> GpuSetReading:
            raise RuntimeError("driver bug")

        def close(self) -> None:
            pass

    src = DeviceSources([AmdGpuSource(fixtures / "rx6900xt"), Broken(), IntelGpuSource(fixtures / "b580")])
    r = src.poll()
    assert [(g.index, g.vendor) for g in r.gpus] == [(0, "amd"), (1, "intel")] and r.unavailable_reason is None
    none = DeviceSources([AmdGpuSource(fixtures / "b580"), IntelGpuSource(fixtures / "rx6900xt")]).poll()
    assert none.gpus == () and none.unavailable_reason == "no AMD GPU (no amdgpu card in sysfs); no Intel Arc GPU"
    assert "RuntimeError: driver bug" in (DeviceSources([Broken()]).poll().unavailable_reason or "")
    src.close()
