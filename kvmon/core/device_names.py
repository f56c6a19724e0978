"""llama.cpp's names for compute devices and buffers, and what they say: which device, which vendor, host or not.

A buffer is named after its device (``CUDA0``, ``ROCm1``, ``Vulkan0``, ``SYCL0``, ``MTL0``, ``RPC[host:port]``) or
is host memory (``CPU``, ``CPU_Mapped``, ``CPU_REPACK``, ``AMX``, ``CUDA_Host``, ``Vulkan_Host``, …). Metal's
buffers are ``MTL0``, ``MTL0_Mapped``, ``MTL0_Private`` since February 2026 and ``Metal``, ``Metal_Mapped`` before:
all of them are the one Metal device, ``MTL0``.
"""

from __future__ import annotations

import re

# the backend → the vendor whose device source numbers devices the way the backend does
_BACKEND_VENDOR = {"CUDA": "nvidia", "ROCm": "amd", "HIP": "amd", "SYCL": "intel", "MTL": "apple"}
_DEVICE = re.compile(r"^(CUDA|ROCm|HIP|Vulkan|SYCL|MUSA|CANN|MTL|OpenCL|BLAS)(\d+)$")


def canonical_device(name: str) -> str:
    """A device's one name: Metal's buffers and old name ("Metal", "MTL0_Mapped") are MTL0."""
    name = name.strip()
    base = name.split("_", 1)[0] if name.endswith(("_Mapped", "_Private")) else name
    return "MTL0" if base == "Metal" else base


def is_device_buffer(name: str) -> bool:
    """Whether a buffer lives on a compute device (else it is host RAM: CPU, CPU_Mapped, AMX, CUDA_Host, …)."""
    dev = canonical_device(name)
    return bool(_DEVICE.match(dev)) or dev.startswith("RPC[")


def backend_vendor(name: str) -> tuple[str | None, int | None]:
    """("nvidia", 1) for "CUDA1"; (None, 0) for "Vulkan0" (any vendor); (None, None) for host or unknown names."""
    m = _DEVICE.match(canonical_device(name))
    if not m:
        return None, None
    return _BACKEND_VENDOR.get(m.group(1)), int(m.group(2))
