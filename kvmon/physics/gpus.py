"""The one table of known GPUs and unified-memory chips: published peak bandwidth and memory.

Used when the hardware cannot say (no NVML, unified memory) and to check NVML's clock × bus width; and the one
rule that chooses a device's peak bandwidth from the user's value, the driver's and the table
(``choose_peak_bandwidth``). Also PCIe link bandwidth by generation, for the spill cliff.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

GB = 1_000_000_000
GIB = 1024**3
# The driver's figure (clock × bus width) and the table may disagree by this much before the table is preferred.
BANDWIDTH_TOLERANCE = 0.10


@dataclass(frozen=True)
class GpuSpec:
    """A device's published peak memory bandwidth and memory size."""

    name: str
    bandwidth_bytes_per_s: float
    vram_bytes: int
    memory: str
    unified_memory: bool = False


KNOWN_GPUS: tuple[GpuSpec, ...] = (
    GpuSpec("RTX 3060", 360 * GB, 12 * GIB, "GDDR6 15 Gbps, 192-bit"),
    GpuSpec("RTX 3060 Ti", 448 * GB, 8 * GIB, "GDDR6 14 Gbps, 256-bit"),
    GpuSpec("RTX 3070", 448 * GB, 8 * GIB, "GDDR6 14 Gbps, 256-bit"),
    GpuSpec("RTX 3070 Ti", 608.3 * GB, 8 * GIB, "GDDR6X 19 Gbps, 256-bit"),
    GpuSpec("RTX 3080", 760 * GB, 10 * GIB, "GDDR6X 19 Gbps, 320-bit (10 GB model; the 12 GB one has 912 GB/s)"),
    GpuSpec("RTX 3080 Ti", 912 * GB, 12 * GIB, "GDDR6X 19 Gbps, 384-bit"),
    GpuSpec("RTX 3090 Ti", 1008 * GB, 24 * GIB, "GDDR6X 21 Gbps, 384-bit"),
    GpuSpec("RTX 3090", 936 * GB, 24 * GIB, "GDDR6X 19.5 Gbps, 384-bit"),
    GpuSpec("RTX 4060", 272 * GB, 8 * GIB, "GDDR6 17 Gbps, 128-bit"),
    GpuSpec("RTX 4060 Ti", 288 * GB, 16 * GIB, "GDDR6 18 Gbps, 128-bit"),
    GpuSpec("RTX 4070", 504 * GB, 12 * GIB, "GDDR6X 21 Gbps, 192-bit"),
    GpuSpec("RTX 4070 SUPER", 504 * GB, 12 * GIB, "GDDR6X 21 Gbps, 192-bit"),
    GpuSpec("RTX 4070 Ti", 504 * GB, 12 * GIB, "GDDR6X 21 Gbps, 192-bit"),
    GpuSpec("RTX 4070 Ti SUPER", 672 * GB, 16 * GIB, "GDDR6X 21 Gbps, 256-bit"),
    GpuSpec("RTX 4080", 716.8 * GB, 16 * GIB, "GDDR6X 22.4 Gbps, 256-bit"),
    GpuSpec("RTX 4080 SUPER", 736 * GB, 16 * GIB, "GDDR6X 23 Gbps, 256-bit"),
    GpuSpec("RTX 4090", 1008 * GB, 24 * GIB, "GDDR6X 21 Gbps, 384-bit"),
    GpuSpec("RTX 5070", 672 * GB, 12 * GIB, "GDDR7 28 Gbps, 192-bit"),
    GpuSpec("RTX 5070 Ti", 896 * GB, 16 * GIB, "GDDR7 28 Gbps, 256-bit"),
    GpuSpec("RTX 5080", 960 * GB, 16 * GIB, "GDDR7 30 Gbps, 256-bit"),
    GpuSpec("RTX 5090", 1792 * GB, 32 * GIB, "GDDR7 28 Gbps, 512-bit"),
    GpuSpec("RTX A4000", 448 * GB, 16 * GIB, "GDDR6 14 Gbps ECC, 256-bit"),
    GpuSpec("RTX A5000", 768 * GB, 24 * GIB, "GDDR6 16 Gbps ECC, 384-bit"),
    GpuSpec("RTX A6000", 768 * GB, 48 * GIB, "GDDR6 16 Gbps ECC, 384-bit"),
    GpuSpec("RTX 6000 Ada", 960 * GB, 48 * GIB, "GDDR6 20 Gbps ECC, 384-bit"),
    GpuSpec("T4", 320 * GB, 16 * GIB, "GDDR6, 256-bit"),
    GpuSpec("A10", 600 * GB, 24 * GIB, "GDDR6, 384-bit"),
    GpuSpec("L4", 300 * GB, 24 * GIB, "GDDR6, 192-bit"),
    GpuSpec("V100", 900 * GB, 32 * GIB, "HBM2, 4096-bit (16 or 32 GB)"),
    GpuSpec("A100 80GB", 2039 * GB, 80 * GIB, "HBM2e, 5120-bit (SXM)"),
    GpuSpec("A100", 1555 * GB, 40 * GIB, "HBM2, 5120-bit"),
    GpuSpec("H100 PCIe", 2000 * GB, 80 * GIB, "HBM2e, 5120-bit"),
    GpuSpec("H100", 3350 * GB, 80 * GIB, "HBM3, 5120-bit (SXM)"),
    GpuSpec("H200", 4800 * GB, 141 * GB, "HBM3e"),
    GpuSpec("L40S", 864 * GB, 48 * GIB, "GDDR6 18 Gbps ECC, 384-bit"),
    GpuSpec("Apple M1 Max", 400 * GB, 64 * GIB, "unified LPDDR5", unified_memory=True),
    GpuSpec("Apple M1 Ultra", 800 * GB, 128 * GIB, "unified LPDDR5", unified_memory=True),
    GpuSpec("Apple M2 Pro", 200 * GB, 32 * GIB, "unified LPDDR5", unified_memory=True),
    GpuSpec("Apple M2 Max", 400 * GB, 96 * GIB, "unified LPDDR5", unified_memory=True),
    GpuSpec("Apple M2 Ultra", 800 * GB, 192 * GIB, "unified LPDDR5", unified_memory=True),
    GpuSpec("Apple M3 Max", 400 * GB, 128 * GIB, "unified LPDDR5 (40-core GPU)", unified_memory=True),
    GpuSpec("Apple M3 Ultra", 819 * GB, 512 * GIB, "unified LPDDR5", unified_memory=True),
    GpuSpec("Apple M4 Pro", 273 * GB, 64 * GIB, "unified LPDDR5X", unified_memory=True),
    GpuSpec("Apple M4 Max", 546 * GB, 128 * GIB, "unified LPDDR5X (40-core GPU)", unified_memory=True),
)


def _norm(name: str) -> str:
    n = name.lower()
    n = re.sub(r"\b(nvidia|geforce|tesla|apple)\b", " ", n)
    n = re.sub(r"[^a-z0-9]+", " ", n)
    return " ".join(n.split())


_VARIANT_WORDS = frozenset({"ti", "super", "laptop", "mobile", "max", "pro", "ultra"})


def lookup_gpu(name: str | None) -> GpuSpec | None:
    """The table entry for a device name as NVML or the OS reports it, or None when unknown.

    "NVIDIA GeForce RTX 4090" → RTX 4090; "NVIDIA A100-SXM4-80GB" → A100 80GB. The longest table name
    whose words appear in order wins; a variant word right after the model number ("Ti", "SUPER",
    "Laptop") that the table name lacks means a different part, so no match.
    """
    if not name:
        return None
    return _lookup_normalised(_norm(name))


@lru_cache(maxsize=64)
def _lookup_normalised(norm_name: str) -> GpuSpec | None:
    """``lookup_gpu`` on a normalised name, memoised: every poll asks again for the same few GPUs."""
    dev = norm_name.split()
    best: GpuSpec | None = None
    best_len = 0
    for spec in KNOWN_GPUS:
        words = _norm(spec.name).split()
        for start in range(len(dev) - len(words) + 1):
            if dev[start] != words[0]:
                continue
            # first word matched; the rest may be separated by other words (e.g. "A100 SXM4 80GB")
            pos, ok = start + 1, True
            for w in words[1:]:
                try:
                    pos = dev.index(w, pos) + 1
                except ValueError:
                    ok = False
                    break
            if not ok:
                continue
            first_end = start + 1 if len(words) == 1 else start + 2
            after = dev[first_end] if first_end < len(dev) else ""
            if after in _VARIANT_WORDS and after not in words:
                continue
            if len(words) > best_len:
                best, best_len = spec, len(words)
            break
    return best


def choose_peak_bandwidth(name: str | None, driver_bytes_per_s: float | None,
                          user_bytes_per_s: float | None = None) -> tuple[float | None, str | None, str | None]:
    """A device's peak memory bandwidth: (bytes/s, source "user" | "nvml" | "table", note) or (None, None, why).

    The one order, for every device source and the analysis: a value the user set wins (they know a part the table
    lacks, a unified-memory chip, a tuned clock); then the driver's own figure (NVML's max memory clock × bus
    width), as long as the known-GPU table agrees within 10 % or has no entry (when they disagree the rating in
    the table is used and the note says why: some drivers report an "effective" clock, twice the real one); then
    the table by name. Unified-memory chips are not GPUs here (their bandwidth is the host's).
    """
    if user_bytes_per_s is not None and user_bytes_per_s > 0:
        return float(user_bytes_per_s), "user", None
    spec = lookup_gpu(name)
    if spec is not None and spec.unified_memory:
        spec = None
    if driver_bytes_per_s is not None:
        if spec is None:
            return driver_bytes_per_s, "nvml", None
        if abs(driver_bytes_per_s - spec.bandwidth_bytes_per_s) <= BANDWIDTH_TOLERANCE * spec.bandwidth_bytes_per_s:
            return driver_bytes_per_s, "nvml", None
        note = (f"NVML clock × bus width gives {driver_bytes_per_s / 1e9:.0f} GB/s but {spec.name} is rated "
                f"{spec.bandwidth_bytes_per_s / 1e9:.0f} GB/s: using the table")
        return spec.bandwidth_bytes_per_s, "table", note
    if spec is not None:
        return spec.bandwidth_bytes_per_s, "table", f"NVML cannot give clock × bus width: {spec.name} rating used"
    return None, None, "NVML cannot give clock × bus width, the GPU is not in the table and no value was set"


# PCIe: usable bytes/s per lane and direction after line encoding (8b/10b for gen 1-2, 128b/130b after).
_PCIE_LANE_BYTES_PER_S: dict[int, float] = {
    1: 2.5e9 * 8 / 10 / 8,
    2: 5.0e9 * 8 / 10 / 8,
    3: 8.0e9 * 128 / 130 / 8,
    4: 16.0e9 * 128 / 130 / 8,
    5: 32.0e9 * 128 / 130 / 8,
    6: 64.0e9 * 242 / 256 / 8,
}


def pcie_bandwidth_bytes_per_s(generation: int | None, width: int | None) -> float | None:
    """One-direction PCIe link bandwidth (gen 4 x16 ≈ 31.5 GB/s), or None when unknown."""
    if generation is None or width is None or width <= 0:
        return None
    lane = _PCIE_LANE_BYTES_PER_S.get(generation)
    return None if lane is None else lane * width
