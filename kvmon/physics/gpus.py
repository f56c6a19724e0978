"""The one table of known GPUs and unified-memory chips: published peak bandwidth and memory.

NVIDIA's rows are here; AMD's (``gpus_amd``), Intel's (``gpus_intel``) and Apple's (``apple_chips``) live beside
it, one module per vendor, and ``KNOWN_GPUS`` is all of them. Used when the hardware cannot say (no NVML, AMD
and Intel sysfs, unified memory, a GPU named only in the server's log) and to check a driver's clock × bus width;
and the one rule that chooses a device's peak bandwidth from the user's value, the driver's and the table
(``choose_peak_bandwidth``). Also PCIe link bandwidth by generation, for the spill cliff.
"""

from __future__ import annotations

import re
from functools import lru_cache

from kvmon.physics.apple_chips import apple_specs
from kvmon.physics.gpu_spec import GB, GIB, GpuSpec
from kvmon.physics.gpus_amd import AMD_GPUS
from kvmon.physics.gpus_intel import INTEL_GPUS

__all__ = ["BANDWIDTH_TOLERANCE", "GB", "GIB", "KNOWN_GPUS", "GpuSpec", "choose_peak_bandwidth", "lookup_gpu",
           "lookup_pci", "pcie_bandwidth_bytes_per_s"]

# The driver's figure (clock × bus width) and the table may disagree by this much before the table is preferred.
BANDWIDTH_TOLERANCE = 0.10


NVIDIA_GPUS: tuple[GpuSpec, ...] = (
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
)

KNOWN_GPUS: tuple[GpuSpec, ...] = NVIDIA_GPUS + AMD_GPUS + INTEL_GPUS + apple_specs()


def _norm(name: str) -> str:
    n = name.lower()
    n = re.sub(r"\((r|tm)\)", " ", n)
    n = re.sub(r"\b(nvidia|geforce|tesla|apple|amd|intel)\b", " ", n)
    n = re.sub(r"[^a-z0-9]+", " ", n)
    return " ".join(n.split())


# A word right after the table name's last word that the table name lacks means another part ("RTX 4070 Ti" is
# not an "RTX 4070", "RX 7900 XTX" not an "RX 7900 XT", "M2 Max" not an "M2").
_VARIANT_WORDS = frozenset({"ti", "super", "laptop", "mobile", "max", "pro", "ultra", "xt", "xtx", "gre"})


def lookup_gpu(name: str | None) -> GpuSpec | None:
    """The table entry for a device name as NVML or the OS reports it, or None when unknown.

    "NVIDIA GeForce RTX 4090" → RTX 4090; "NVIDIA A100-SXM4-80GB" → A100 80GB; "AMD Radeon RX 7900 XTX",
    "Intel(R) Arc(TM) A770 Graphics", "Apple M2 Max" likewise. The longest table name whose words appear in
    order wins; a variant word right after the table name's last word ("Ti", "SUPER", "Laptop", "XT", "Max")
    that the table name lacks means a different part, so no match.
    """
    if not name:
        return None
    return _lookup_normalised(_norm(name))


@lru_cache(maxsize=64)  # 0.18 ms a GPU a poll: 0.024 CPU-s/min at 1 Hz with bench/poll_cost.py's two GPUs
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
            after = dev[pos] if pos < len(dev) else ""
            if after in _VARIANT_WORDS and after not in words:
                continue
            if len(words) > best_len:
                best, best_len = spec, len(words)
            break
    return best


def lookup_pci(pci_id: str | None, memory_bytes: int | None = None) -> GpuSpec | None:
    """The table entry for a PCI ``vendor:device`` id ("1002:744c"), or None.

    One id often covers several cards (744c: the 7900 XT, XTX and GRE): the memory size (within 15 %) picks
    among them; cards left that share one bandwidth (73bf: 6800, 6800 XT, 6900 XT at 512 GB/s) give one entry
    named after all of them, so the bandwidth is known without claiming which card it is. Different bandwidths
    left over give None: that would be a guess.
    """
    if not pci_id:
        return None
    pid = pci_id.strip().lower().replace("0x", "")
    cands = [g for g in KNOWN_GPUS if pid in g.pci_ids]
    if memory_bytes:
        cands = [g for g in cands if abs(g.vram_bytes - memory_bytes) <= 0.15 * g.vram_bytes]
    if not cands or len({g.bandwidth_bytes_per_s for g in cands}) != 1:
        return None
    if len(cands) == 1:
        return cands[0]
    first = cands[0]
    names = [c.name.removeprefix("Radeon ") if i else c.name for i, c in enumerate(cands)]  # "Radeon RX 6800 / RX …"
    return GpuSpec(" / ".join(names), first.bandwidth_bytes_per_s, first.vram_bytes, first.memory,
                   unified_memory=first.unified_memory, vendor=first.vendor, pci_ids=first.pci_ids)


def choose_peak_bandwidth(name: str | None, driver_bytes_per_s: float | None,
                          user_bytes_per_s: float | None = None) -> tuple[float | None, str | None, str | None]:
    """A device's peak memory bandwidth: (bytes/s, source "user" | "nvml" | "table", note) or (None, None, why).

    The one order, for every device source and the analysis: a value the user set wins (they know a part the table
    lacks, a unified-memory chip, a tuned clock); then the driver's own figure (NVML's max memory clock × bus
    width), as long as the known-GPU table agrees within 10 % or has no entry (when they disagree the rating in
    the table is used and the note says why: some drivers report an "effective" clock, twice the real one); then
    the table by name. Unified-memory chips are not discrete GPUs here (their bandwidth comes from the chip table
    by their sources, ``kvmon.physics.apple_chips``, or the host's).
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
