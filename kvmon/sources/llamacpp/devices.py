"""The compute devices a llama.cpp log names: its device lists at start, ``using device …``, Metal's init.

Formats (each backend's own, in every spelling since 2024; see tests/fixtures/llama-server-logs):

- CUDA / ROCm (HIP) / MUSA / old SYCL: ``ggml_cuda_init: found 2 CUDA devices (Total VRAM: …):`` then
  ``  Device 0: NVIDIA GeForce RTX 3090, compute capability 8.6, VMM: yes[, VRAM: 24135 MiB]`` (HIP:
  ``AMD Radeon RX 7900 XTX, gfx1100 (0x1100), VMM: no, Wave Size: 32``); the device is ``<backend><n>``.
- Vulkan: ``ggml_vulkan: 0 = AMD Radeon RX 7900 XTX (RADV NAVI31) (radv) | uma: 0 | …`` (older
  ``Vulkan0: AMD Radeon RX 6600M | uma: 0 | …``); ``uma: 1`` is an integrated GPU on system RAM.
- Metal: ``ggml_metal_device_init: GPU name:   MTL0 (Apple M1 Max)`` (older ``ggml_metal_init: GPU name:   Apple
  M1 Pro``), ``has unified memory = true`` / ``hasUnifiedMemory = true``, ``recommendedMaxWorkingSetSize = 22906.50
  MB`` — decimal MB since December 2023, MiB before it (those logs still print ``ggml_metal_add_buffer``).
- SYCL tables: ``| 0|[level_zero:gpu:0]| Intel(R) Arc(TM) A770 Graphics| … |16225M|…`` (MB) or bytes (2024).
- Every backend: ``using device CUDA0 (NVIDIA GeForce RTX 3090) (0000:01:00.0) - 23000 MiB free`` (the PCI id
  since 2025-09), ``device_info:`` lines ``  - ROCm0   : AMD Radeon AI PRO R9700 (32624 MiB, 32534 MiB free)``,
  ``--list-devices``'s ``  MTL0: Apple M1 Max (26000 MiB, 25999 MiB free)``, and the memory breakdown table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kvmon.core.bounds import MAX_BYTES, MAX_DEVICES
from kvmon.core.device_names import canonical_device
from kvmon.core.jsonvals import text_float, text_int
from kvmon.core.readings import LogDevice
from kvmon.core.units import MIB

_CUDA_HEADER = re.compile(r"found (\d+) (CUDA|ROCm|MUSA|SYCL) devices")
_CUDA_DEVICE = re.compile(r"(?:^|\s)Device (\d+): (.+?),\s+(?:compute capability|gfx\w+ \(0x)[^\n]*?"
                          r"(?:VRAM: (\d+) MiB)?(?: \((\d+) MiB free\))?\s*$")
_VK_DEVICE = re.compile(r"ggml_vulkan: (\d+) = (.+?) \| uma: (\d)")
_VK_OLD = re.compile(r"(?:^|\s)(Vulkan\d+): (.+?) \| uma: (\d)")
_METAL_NAME = re.compile(r"GPU name:\s+(?:(MTL\d+) \((.+)\)|(.+?))\s*$")
_METAL_PICK = re.compile(r"ggml_metal_init: picking default device: (.+?)\s*$")
_METAL_UMA = re.compile(r"(?:has unified memory|hasUnifiedMemory)\s*=\s*(true|false)")
_METAL_WS = re.compile(r"recommendedMaxWorkingSetSize\s*=\s*([0-9]+(?:[.,][0-9]+)?) MB")
_METAL_PAIR = re.compile(r"ggml_backend_metal_buffer_from_ptr: allocated buffer, size = .*\(\s*[0-9.]+ / ([0-9.]+)\)")
# the one reading of "using device CUDA0 (NVIDIA …) (0000:01:00.0) - 7546 MiB free" in every era (with or without the
# PCI id, the dash or the parentheses; Metal's "Metal" is MTL0 like its buffers)
_USING = re.compile(r"using device (\S+) (.+?)(?: -)? +(\d+) MiB free")
_ID_TAIL = re.compile(r"^(.*\)) \(((?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-9]|unknown id)\)$")
_LISTED = re.compile(r"(?:^|\s)(?:- )?([A-Za-z][A-Za-z_]*\d+)\s*: (.+) \((\d+) MiB, (\d+) MiB free\)\s*$")
_BREAKDOWN = re.compile(r"memory_breakdown_print: \|\s+- (\S+) \((.+?)\)\s*\|\s*(\d+) = (\d+) \+")
_SYCL_ROW = re.compile(r"^\|\s*(\d+)\|\s*\[[a-z_]+:gpu:\d+\]\|\s*([^|]+?)\|(.*)\|\s*$")
_VERBOSITY = re.compile(r"verbosity = (\d+) \(adjust with")
_OLD_METAL_ERA = "ggml_metal_add_buffer"  # printed only before the December 2023 change of unit
_PREFILTER = ("evice", "ggml_vulkan", "Vulkan", "GPU name", "nified", "WorkingSet", "SYCL", "MiB free", "|",
              "verbosity", "metal")


def _size(text: str, unit: int = MIB) -> int:
    """A printed size in ``unit`` as bytes; ValueError (the line is skipped and counted) past any machine."""
    n = text_int(text, limit=MAX_BYTES // unit)
    if n is None:
        raise ValueError(f"{text[:20]!r} is not a size")
    return n * unit


def _number(text: str) -> float:
    f = text_float(text, limit=MAX_BYTES / MIB)
    if f is None:
        raise ValueError(f"{text[:20]!r} is not a size")
    return f


@dataclass
class _Dev:
    name: str
    description: str | None = None
    pci_bus_id: str | None = None
    total_bytes: int | None = None
    free_bytes: int | None = None
    unified_memory: bool | None = None


@dataclass
class DeviceLines:
    """Feed log lines in order; ``devices()`` lists what they named, in the server's order."""

    found: dict[str, _Dev] = field(default_factory=dict)
    using_free_bytes: dict[str, int] = field(default_factory=dict)  # "using device … MiB free", by device
    verbosity: int | None = None
    _backend: str | None = None  # the backend of the last "found N X devices" header
    _metal_ws: float | None = None  # the working-set figure as printed (MB, or MiB in old logs)
    _metal_ws_mib: bool = False
    _metal_pair_mib: float | None = None

    def _dev(self, name: str) -> _Dev:
        name = canonical_device(name)
        if name not in self.found:
            if len(self.found) >= MAX_DEVICES:
                raise ValueError(f"more than {MAX_DEVICES} devices named")
            self.found[name] = _Dev(name)
        return self.found[name]

    def feed(self, line: str) -> bool:
        """Take one line; True when it named or described a device."""
        if not any(k in line for k in _PREFILTER):
            return False
        if _OLD_METAL_ERA in line:
            self._metal_ws_mib = True
        m = _VERBOSITY.search(line)
        if m:
            self.verbosity = text_int(m.group(1), limit=99)
            return False
        m = _CUDA_HEADER.search(line)
        if m:
            self._backend = m.group(2)
            return True
        m = _CUDA_DEVICE.search(line)
        if m and self._backend:
            d = self._dev(f"{self._backend}{m.group(1)}")
            d.description = d.description or m.group(2).strip()
            if m.group(3):
                d.total_bytes = _size(m.group(3))
            return True
        for rx in (_VK_DEVICE, _VK_OLD):
            m = rx.search(line)
            if m:
                name = m.group(1) if m.group(1).startswith("Vulkan") else f"Vulkan{m.group(1)}"
                d = self._dev(name)
                desc = m.group(2).strip()
                if rx is _VK_DEVICE:  # "<device name> (<driver name>)"
                    desc = re.sub(r"\s*\([^()]*\)\s*$", "", desc) or desc
                d.description, d.unified_memory = desc, m.group(3) == "1"
                return True
        m = _USING.search(line)
        if m:
            d = self._dev(m.group(1))
            middle = m.group(2).strip()
            tail = _ID_TAIL.match(middle)
            if tail:
                middle = tail.group(1)
                if tail.group(2) != "unknown id":
                    d.pci_bus_id = tail.group(2).lower()
            if middle.startswith("(") and middle.endswith(")"):
                middle = middle[1:-1]
            d.description = middle or d.description
            d.free_bytes = self.using_free_bytes[d.name] = _size(m.group(3))
            return True
        m = _LISTED.search(line)
        if m:
            d = self._dev(m.group(1))
            d.description = m.group(2).strip()
            d.total_bytes, d.free_bytes = _size(m.group(3)), _size(m.group(4))
            return True
        m = _BREAKDOWN.search(line)
        if m:
            d = self._dev(m.group(1))
            d.description = d.description or m.group(2).strip()
            d.total_bytes = d.total_bytes or _size(m.group(3))
            return True
        return self._metal(line) or self._sycl(line)

    def _metal(self, line: str) -> bool:
        m = _METAL_NAME.search(line)
        if m:
            d = self._dev(m.group(1) or "MTL0")
            d.description = (m.group(2) or m.group(3)).strip()
            return True
        m = _METAL_PICK.search(line)
        if m:
            d = self._dev("MTL0")
            d.description = d.description or m.group(1)
            return True
        m = _METAL_UMA.search(line)
        if m:
            self._dev("MTL0").unified_memory = m.group(1) == "true"
            return True
        m = _METAL_WS.search(line)
        if m:
            self._dev("MTL0")
            self._metal_ws = _number(m.group(1).replace(",", "."))
            return True
        m = _METAL_PAIR.search(line)
        if m:
            self._dev("MTL0")
            self._metal_pair_mib = _number(m.group(1))
            return True
        return False

    def _sycl(self, line: str) -> bool:
        m = _SYCL_ROW.match(line.strip())
        if not m:
            return False
        d = self._dev(f"SYCL{m.group(1)}")
        d.description = m.group(2).strip()
        cells = [c.strip() for c in m.group(3).split("|")]
        sized = [c for c in cells if c.endswith("M") and c[:-1].isdigit()]
        if sized:  # since December 2024: decimal MB with an M
            d.total_bytes = _size(sized[-1][:-1], 1_000_000)
        else:
            plain = [n for c in cells if c.isdigit() and (n := _size(c, 1)) >= 100_000_000]
            if plain:
                d.total_bytes = plain[-1]
        return True

    def devices(self) -> tuple[LogDevice, ...]:
        """What the log said, one entry per device."""
        out = []
        for d in self.found.values():
            ws = None  # Metal's working set, the one device that has one
            if d.name == "MTL0":
                if self._metal_ws is not None:
                    ws = int(self._metal_ws * (MIB if self._metal_ws_mib else 1_000_000))
                elif self._metal_pair_mib is not None:
                    ws = int(self._metal_pair_mib * MIB)
            out.append(LogDevice(name=d.name, description=d.description, pci_bus_id=d.pci_bus_id,
                                 total_bytes=d.total_bytes, free_bytes=d.free_bytes,
                                 unified_memory=d.unified_memory, working_set_limit_bytes=ws))
        return tuple(out)
