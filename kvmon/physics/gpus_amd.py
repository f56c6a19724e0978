"""AMD GPUs: published peak memory bandwidth, memory size and PCI device ids (the table kvmon reads by name or id).

Radeon figures are AMD's spec sheets as reproduced in launch reviews (Tom's Hardware, PC Perspective, KitGuru,
Club386, overclocking.com, The FPS Review, HotHardware, TechPowerUp, Hardwareluxx); Instinct figures are AMD's
ROCm documentation (``docs/reference/gpu-arch-specs.rst``, ``docs/conceptual/gpu-arch/mi100.md``, ``mi250.md``,
``mi300.md`` in github.com/ROCm/ROCm) and AnandTech's MI210 launch article; the MI325X figure is quoted from AMD's
product page by Vultr's ROCm guide. PCI ids from pci.ids (2025.06.21). RX 9070 / 9070 XT: launch press (20 Gbps,
256-bit). Each MI250/MI250X compute die shows up as its own device with half the package (64 GB, 1.6 TB/s).

``AMD_APU_PCI_IDS`` names the integrated GPUs that compute from system RAM: their memory and bandwidth are the
host's (the Ryzen AI Max "Strix Halo" is in the table: its 256-bit LPDDR5X-8000 is fixed by the platform).
"""

from __future__ import annotations

from kvmon.physics.gpu_spec import GB, GIB, GpuSpec


def _amd(name: str, gb_s: float, vram_gib: float, memory: str, *ids: str, unified: bool = False) -> GpuSpec:
    return GpuSpec(name, gb_s * GB, int(vram_gib * GIB), memory, unified_memory=unified, vendor="amd",
                   pci_ids=tuple(f"1002:{i}" for i in ids))


AMD_GPUS: tuple[GpuSpec, ...] = (
    _amd("Radeon RX 6400", 128, 4, "GDDR6 16 Gbps, 64-bit", "743f"),
    _amd("Radeon RX 6500 XT", 144, 4, "GDDR6 18 Gbps, 64-bit", "743f"),
    _amd("Radeon RX 6600", 224, 8, "GDDR6 14 Gbps, 128-bit", "73ff"),
    _amd("Radeon RX 6600 XT", 256, 8, "GDDR6 16 Gbps, 128-bit", "73ff"),
    _amd("Radeon RX 6650 XT", 280, 8, "GDDR6 17.5 Gbps, 128-bit", "73ef"),
    _amd("Radeon RX 6700 XT", 384, 12, "GDDR6 16 Gbps, 192-bit", "73df"),
    _amd("Radeon RX 6750 XT", 432, 12, "GDDR6 18 Gbps, 192-bit", "73df"),
    _amd("Radeon RX 6800", 512, 16, "GDDR6, 256-bit", "73bf"),
    _amd("Radeon RX 6800 XT", 512, 16, "GDDR6 16 Gbps, 256-bit", "73bf"),
    _amd("Radeon RX 6900 XT", 512, 16, "GDDR6 16 Gbps, 256-bit", "73bf", "73af"),
    _amd("Radeon RX 6950 XT", 576, 16, "GDDR6 18 Gbps, 256-bit", "73a5"),
    _amd("Radeon RX 7600", 288, 8, "GDDR6 18 Gbps, 128-bit", "7480"),
    _amd("Radeon RX 7600 XT", 288, 16, "GDDR6 18 Gbps, 128-bit", "7480"),
    _amd("Radeon RX 7700 XT", 432, 12, "GDDR6 18 Gbps, 192-bit", "747e"),
    _amd("Radeon RX 7800 XT", 624, 16, "GDDR6 19.5 Gbps, 256-bit", "747e"),
    _amd("Radeon RX 7900 GRE", 576, 16, "GDDR6 18 Gbps, 256-bit", "744c"),
    _amd("Radeon RX 7900 XT", 800, 20, "GDDR6 20 Gbps, 320-bit", "744c"),
    _amd("Radeon RX 7900 XTX", 960, 24, "GDDR6 20 Gbps, 384-bit", "744c"),
    _amd("Radeon PRO W7900", 864, 48, "GDDR6 ECC, 384-bit", "7448"),
    _amd("Radeon RX 9060 XT", 320, 16, "GDDR6 20 Gbps, 128-bit (8 or 16 GB)", "7590"),
    _amd("Radeon RX 9070", 640, 16, "GDDR6 20 Gbps, 256-bit", "7550"),
    _amd("Radeon RX 9070 XT", 640, 16, "GDDR6 20 Gbps, 256-bit", "7550"),
    _amd("Radeon 8060S", 256, 128, "system LPDDR5X-8000, 256-bit (Ryzen AI Max, up to 128 GB)", "1586",
         unified=True),
    _amd("Instinct MI100", 1228, 32, "HBM2 2.4 Gbps, 4096-bit", "738c", "738e"),
    _amd("Instinct MI210", 1600, 64, "HBM2e 3.2 Gbps, 4096-bit", "740f"),
    _amd("Instinct MI250", 1600, 64, "HBM2e, per compute die (two per card)", "740c"),
    _amd("Instinct MI250X", 1600, 64, "HBM2e, per compute die (two per card)", "7408"),
    _amd("Instinct MI300X", 5300, 192, "HBM3, 8 stacks", "74a1"),
    _amd("Instinct MI325X", 6000, 256, "HBM3E", "74a5"),
)

# Integrated Radeon GPUs without a fixed memory system (DDR4/DDR5/LPDDR5 of the laptop or board): their
# bandwidth is the host's. Phoenix/Hawk Point (780M), Strix Point (880M/890M), Krackan (840M/860M),
# Rembrandt (680M), Van Gogh (Steam Deck), Renoir; ids from pci.ids.
AMD_APU_PCI_IDS: frozenset[str] = frozenset(
    f"1002:{i}" for i in ("15bf", "1900", "150e", "1114", "1681", "163f", "1636", "1586"))
