"""Device and buffer names from llama.cpp's logs folded into one device each, and which buffers are a device's."""

from __future__ import annotations

import pytest

from kvmon.core.device_names import backend_vendor, canonical_device, is_device_buffer


@pytest.mark.parametrize(("buffer", "device"), [
    ("CUDA0", "CUDA0"), ("MTL0_Mapped", "MTL0"), ("Metal_Mapped", "MTL0"), ("Metal", "MTL0"), ("MTL0", "MTL0"),
    ("MTL0_Private", "MTL0"), ("CUDA_Host", "CUDA_Host"), ("RPC[10.0.2.242:50052]", "RPC[10.0.2.242:50052]"),
])
def test_buffer_names_fold_into_their_device(buffer: str, device: str) -> None:
    assert canonical_device(buffer) == device


def test_which_buffers_are_devices_and_whose() -> None:
    for host in ("CPU", "CPU_Mapped", "CPU_REPACK", "AMX", "CUDA_Host", "ROCm_Host", "Vulkan_Host", "SYCL_Host"):
        assert not is_device_buffer(host), host
    for dev in ("CUDA0", "ROCm3", "Vulkan0", "SYCL0", "MTL0_Mapped", "Metal", "RPC[10.0.2.242:50052]"):
        assert is_device_buffer(dev), dev
    assert backend_vendor("CUDA1") == ("nvidia", 1) and backend_vendor("ROCm0") == ("amd", 0)
    assert backend_vendor("Metal_Mapped") == ("apple", 0) and backend_vendor("SYCL0") == ("intel", 0)
    assert backend_vendor("Vulkan0") == (None, 0) and backend_vendor("CPU") == (None, None)
