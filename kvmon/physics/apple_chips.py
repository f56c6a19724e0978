"""Apple Silicon: memory bandwidth of every M1–M5 chip and bin, and the GPU's working-set share of RAM.

Bandwidth is Apple's figure per chip as its announcements and spec pages state it (via MacRumors, Ars Technica's
comparison tables, Notebookcheck, Gigazine, iDownloadBlog, BGR, TechPowerUp); where a chip comes in two bins
with different memory systems (M3 Max 300/400 GB/s, M4 Max 410/546 GB/s, M5 Max) the bin is told apart by its
CPU core counts (``hw.perflevel0.physicalcpu``) or GPU core count, since ``machdep.cpu.brand_string`` is the same
for both. Apple gives no figure for the M1: its 68.25 GB/s is LPDDR4X-4266 on a 128-bit bus, computed (Apple says
the M2's 100 GB/s is "50 percent" more). The 32-core-GPU M5 Max has no published figure.

The working-set limit (how much memory the GPU may wire) is Metal's ``recommendedMaxWorkingSetSize``; Apple does not
document the rule behind it. Measured Macs give about 2/3 of RAM up to 36 GB and 3/4 above on macOS 14–15, a little
more on macOS 26 (0.74–0.84): ``estimated_working_set_bytes`` takes the lower rule (a warning comes early, not
late) and is only used when the real value cannot be read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kvmon.physics.gpu_spec import GB, GIB, GpuSpec


@dataclass(frozen=True)
class AppleChipBin:
    """One bin of one chip: its CPU (and performance-core) count, GPU cores, bandwidth and largest memory."""

    chip: str  # "M3 Max"
    bandwidth_bytes_per_s: float
    max_memory_bytes: int
    memory: str
    cpu_cores: int | None = None
    perf_cores: int | None = None
    gpu_cores: int | None = None


def _bin(chip: str, gb_s: float, max_gib: int, memory: str, cpu: int | None = None, perf: int | None = None,
         gpu: int | None = None) -> AppleChipBin:
    return AppleChipBin(chip, gb_s * GB, max_gib * GIB, memory, cpu, perf, gpu)


APPLE_CHIPS: tuple[AppleChipBin, ...] = (
    _bin("M1", 68.25, 16, "LPDDR4X-4266, 128-bit (computed: Apple gives no figure)"),
    _bin("M1 Pro", 200, 32, "LPDDR5"),
    _bin("M1 Max", 400, 64, "LPDDR5"),
    _bin("M1 Ultra", 800, 128, "LPDDR5"),
    _bin("M2", 100, 24, "LPDDR5"),
    _bin("M2 Pro", 200, 32, "LPDDR5"),
    _bin("M2 Max", 400, 96, "LPDDR5"),
    _bin("M2 Ultra", 800, 192, "LPDDR5"),
    _bin("M3", 100, 24, "LPDDR5"),
    _bin("M3 Pro", 150, 36, "LPDDR5"),
    _bin("M3 Max", 300, 96, "LPDDR5 (14-core CPU, 30-core GPU)", cpu=14, perf=10, gpu=30),
    _bin("M3 Max", 400, 128, "LPDDR5 (16-core CPU, 40-core GPU)", cpu=16, perf=12, gpu=40),
    _bin("M3 Ultra", 800, 512, "LPDDR5"),
    _bin("M4", 120, 32, "LPDDR5X"),
    _bin("M4 Pro", 273, 64, "LPDDR5X"),
    _bin("M4 Max", 410, 36, "LPDDR5X (14-core CPU, 32-core GPU)", cpu=14, perf=10, gpu=32),
    _bin("M4 Max", 546, 128, "LPDDR5X (16-core CPU, 40-core GPU)", cpu=16, perf=12, gpu=40),
    _bin("M5", 153, 32, "LPDDR5X"),
    _bin("M5 Pro", 307, 64, "LPDDR5X"),
    _bin("M5 Max", 614, 128, "LPDDR5X-9600 (40-core GPU)", gpu=40),
)

_CHIP_NAME = re.compile(r"\bM([1-9])(?: (Pro|Max|Ultra))?\b")


def apple_chip_name(brand: str | None) -> str | None:
    """"Apple M3 Max" (sysctl, Metal or llama.cpp's log) → "M3 Max"; None for anything else."""
    if not brand or "apple" not in brand.lower():
        return None
    m = _CHIP_NAME.search(brand.replace("(", " ").replace(")", " "))
    if m is None:
        return None
    return f"M{m.group(1)}" + (f" {m.group(2)}" if m.group(2) else "")


def apple_chip_bins(chip: str) -> tuple[AppleChipBin, ...]:
    """Every bin of ``chip`` ("M4 Max"), slowest first."""
    return tuple(sorted((b for b in APPLE_CHIPS if b.chip == chip), key=lambda b: b.bandwidth_bytes_per_s))


def apple_bandwidth(brand: str | None, *, cpu_cores: int | None = None, perf_cores: int | None = None,
                    gpu_cores: int | None = None) -> tuple[float | None, str | None]:
    """(bytes/s, note) for an Apple chip by its brand string and, for binned chips, its core counts.

    When the bin cannot be told (core counts unknown), the faster bin's figure is returned — a ceiling stays an
    upper bound — and the note says so; an unknown chip or an unpublished bin gives (None, why).
    """
    chip = apple_chip_name(brand)
    if chip is None:
        return None, f"{brand or 'this chip'} is not an Apple Silicon chip kvmon knows"
    bins = apple_chip_bins(chip)
    if not bins:
        return None, f"Apple {chip} is not in kvmon's chip table (set the bandwidth in settings)"
    if len(bins) == 1:
        only = bins[0]
        if only.gpu_cores is not None and gpu_cores is not None and gpu_cores != only.gpu_cores:
            return None, (f"Apple {chip} with a {gpu_cores}-core GPU: Apple publishes no bandwidth for this bin "
                          "(set it in settings)")
        if only.gpu_cores is not None and gpu_cores is None:
            return only.bandwidth_bytes_per_s, (f"the {only.gpu_cores}-core-GPU Apple {chip}'s figure: a smaller "
                                                "bin would be slower (its GPU core count was not read)")
        return only.bandwidth_bytes_per_s, None
    for b in bins:
        if (gpu_cores is not None and b.gpu_cores == gpu_cores) or (
                perf_cores is not None and b.perf_cores == perf_cores) or (
                cpu_cores is not None and b.cpu_cores == cpu_cores):
            return b.bandwidth_bytes_per_s, None
    top = bins[-1]
    figures = " or ".join(f"{b.bandwidth_bytes_per_s / GB:.0f}" for b in bins)
    return top.bandwidth_bytes_per_s, (f"Apple {chip} comes in bins of {figures} GB/s and the core counts do not "
                                       f"say which this is: the faster figure is used")


def apple_specs() -> tuple[GpuSpec, ...]:
    """One table row per chip (its fastest bin), for name lookup and the what-if presets."""
    out: dict[str, GpuSpec] = {}
    for b in APPLE_CHIPS:
        spec = GpuSpec(f"Apple {b.chip}", b.bandwidth_bytes_per_s, b.max_memory_bytes, f"unified {b.memory}",
                       unified_memory=True, vendor="apple")
        if b.chip not in out or spec.bandwidth_bytes_per_s > out[b.chip].bandwidth_bytes_per_s:
            out[b.chip] = spec
    return tuple(out.values())


def apple_bin_specs() -> tuple[GpuSpec, ...]:
    """One row per bin (binned chips named with their cores), for the what-if presets."""
    out = []
    for b in APPLE_CHIPS:
        several = len(apple_chip_bins(b.chip)) > 1
        label = f"Apple {b.chip}" + (f" ({b.gpu_cores}-core GPU)" if several and b.gpu_cores else "")
        out.append(GpuSpec(label, b.bandwidth_bytes_per_s, b.max_memory_bytes, f"unified {b.memory}",
                           unified_memory=True, vendor="apple"))
    return tuple(out)


# The GPU's default working set as a share of RAM, by RAM size (see the module docstring).
_SMALL_RAM_BYTES = 36 * GIB
_SMALL_SHARE = 2 / 3
_LARGE_SHARE = 3 / 4


def estimated_working_set_bytes(ram_bytes: int) -> int:
    """macOS's default GPU working-set limit for ``ram_bytes`` of RAM, estimated (2/3 up to 36 GB, 3/4 above)."""
    share = _SMALL_SHARE if ram_bytes <= _SMALL_RAM_BYTES else _LARGE_SHARE
    return int(ram_bytes * share)
