"""The compute devices a llama.cpp log names, in each backend's own spelling: CUDA's device list and its "using
device" line, Vulkan's integrated GPUs on system RAM, and Metal's working set in decimal MB (MiB before December
2023). A log naming more devices than any machine has is refused."""

from __future__ import annotations

import pytest

from kvmon.core.units import MIB
from kvmon.sources.llamacpp.devices import DeviceLines


def _devices(log: str) -> tuple:
    lines = DeviceLines()
    for line in log.splitlines():
        lines.feed(line)
    return lines.devices()


def test_cuda_devices_with_their_memory_and_the_one_in_use_with_its_bus_id() -> None:
    a, b = _devices(
        "ggml_cuda_init: found 2 CUDA devices (Total VRAM: 48270 MiB):\n"
        "  Device 0: NVIDIA GeForce RTX 3090, compute capability 8.6, VMM: yes, VRAM: 24135 MiB\n"
        "  Device 1: NVIDIA GeForce RTX 3090, compute capability 8.6, VMM: yes, VRAM: 24135 MiB\n"
        "load_tensors: using device CUDA0 (NVIDIA GeForce RTX 3090) (0000:01:00.0) - 23000 MiB free\n")
    assert (a.name, a.description, a.total_bytes) == ("CUDA0", "NVIDIA GeForce RTX 3090", 24135 * MIB)
    assert (a.pci_bus_id, a.free_bytes) == ("0000:01:00.0", 23000 * MIB)
    assert (b.name, b.pci_bus_id, b.free_bytes) == ("CUDA1", None, None)


def test_a_vulkan_integrated_gpu_is_unified_memory_named_without_its_driver() -> None:
    (igpu,) = _devices("ggml_vulkan: 0 = AMD Radeon 780M (RADV GFX1103_R1) (radv) | uma: 1 | fp16: 1 | warp size: 64")
    assert (igpu.name, igpu.description, igpu.unified_memory) == ("Vulkan0", "AMD Radeon 780M (RADV GFX1103_R1)", True)


def test_metals_working_set_in_decimal_mb() -> None:
    (mtl,) = _devices("ggml_metal_device_init: GPU name:   MTL0 (Apple M1 Max)\n"
                      "ggml_metal_device_init: has unified memory    = true\n"
                      "ggml_metal_device_init: recommendedMaxWorkingSetSize  = 22906.50 MB\n")
    assert (mtl.name, mtl.description, mtl.unified_memory) == ("MTL0", "Apple M1 Max", True)
    assert mtl.working_set_limit_bytes == 22_906_500_000


def test_a_log_from_before_december_2023_printed_mib_under_the_name_mb() -> None:
    (mtl,) = _devices("ggml_metal_init: GPU name:   Apple M1 Pro\n"
                      "ggml_metal_init: hasUnifiedMemory              = true\n"
                      "ggml_metal_init: recommendedMaxWorkingSetSize  = 21845.34 MB\n"
                      "ggml_metal_add_buffer: allocated 'data            ' buffer, size =  3648.59 MB, "
                      "( 3649.22 / 21845.34)\n")
    assert mtl.working_set_limit_bytes == pytest.approx(21845.34 * MIB, abs=1)


def test_a_log_naming_more_devices_than_any_machine_has_is_refused() -> None:
    lines = DeviceLines()
    lines.feed("ggml_cuda_init: found 99 CUDA devices (Total VRAM: 1 MiB):")
    with pytest.raises(ValueError, match="more than 64 devices named"):
        for i in range(99):
            lines.feed(f"  Device {i}: NVIDIA GeForce RTX 3090, compute capability 8.6, VMM: yes, VRAM: 24135 MiB")
