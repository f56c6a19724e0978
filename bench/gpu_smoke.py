"""GPU smoke check: every GPU's full kvmon reading as JSON, then consistency checks against NVML, the table and
``nvidia-smi -q``.

Needs only ``pip install nvidia-ml-py`` and this repository (kvmon is put on ``sys.path`` from here).
Checks: used + reserved + free ≈ total; NVML's clock × bus width within 10% of the known-GPU table for
known names; identity present; every unknown field says why; kvmon's memory figures match a direct NVML
call. With PyTorch or CuPy installed it also streams device memory for a few seconds and reports the copy
bandwidth, GPM's DRAM utilisation and this process's attributed VRAM (``--no-load`` skips that).

Then kvmon's readings side by side with ``nvidia-smi -q -x`` taken at the same moment: memory and graphics clocks
now and at most, why the clocks are held down (clocks event reasons), the PCIe link's generation and width now and
at most, power drawn and its limit, and another process's memory: a child process allocates ``--other-gib`` GiB
with the CUDA driver API (``libcuda`` through ctypes) and keeps the memory busy with ``cuMemsetD8``, so that the
clocks run at load and kvmon must count it as another program's. ``--fake`` runs all of it on kvmon's fake NVML
(``nvidia-smi``'s answer rendered from the fake's state): a dry run of the comparison.

Exits 0 when all checks pass or there is no NVIDIA GPU (with a message; ``--require-gpu``: 2 then), 1 when a check
fails. Runs in well under a minute.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvmon.core.report_json import json_safe
from kvmon.physics.gpus import BANDWIDTH_TOLERANCE, lookup_gpu
from kvmon.sources.nvml import FIELDS_NOT_READ, NvmlSource, nvml_peak_bandwidth_bytes_per_s

GIB = 1024**3


class Checks:
    """Collects named pass/fail/info lines and prints them."""

    def __init__(self) -> None:
        self.failed = 0
        self.lines: list[str] = []

    def check(self, ok: bool, what: str) -> None:
        self.lines.append(f"  [{'ok' if ok else 'FAIL'}] {what}")
        self.failed += 0 if ok else 1

    def info(self, what: str) -> None:
        self.lines.append(f"  [info] {what}")


def _check_gpu(g: Any, raw_memory: Any, checks: Checks) -> None:
    checks.lines.append(f"GPU {g.index}: {g.name} ({g.uuid})")
    checks.check(bool(g.name) and bool(g.uuid), "name and UUID read")
    if g.vram_total_bytes is not None and g.vram_used_bytes is not None and g.vram_free_bytes is not None:
        total = g.vram_total_bytes
        summed = g.vram_used_bytes + (g.vram_reserved_bytes or 0) + g.vram_free_bytes
        checks.check(abs(summed - total) <= 0.01 * total,
                     f"used {g.vram_used_bytes / GIB:.2f} + reserved {(g.vram_reserved_bytes or 0) / GIB:.2f} + "
                     f"free {g.vram_free_bytes / GIB:.2f} = {summed / GIB:.2f} GiB ≈ total {total / GIB:.2f} GiB")
    else:
        checks.info(f"memory not readable: {g.reasons.get('vram_total_bytes')}")
    if raw_memory is not None and g.vram_total_bytes is not None:
        checks.check(int(raw_memory.total) == g.vram_total_bytes, "total matches a direct nvmlDeviceGetMemoryInfo")
    from_nvml = nvml_peak_bandwidth_bytes_per_s(g.mem_clock_max_mhz, g.bus_width_bits)
    spec = lookup_gpu(g.name)
    if from_nvml is not None:
        checks.info(f"NVML: max mem clock {g.mem_clock_max_mhz:.0f} MHz × {g.bus_width_bits} bit → "
                    f"{from_nvml / 1e9:.0f} GB/s")
    if spec is not None and from_nvml is not None:
        off = from_nvml / spec.bandwidth_bytes_per_s - 1
        checks.check(abs(off) <= BANDWIDTH_TOLERANCE,
                     f"NVML peak within 10% of the table ({spec.name}: {spec.bandwidth_bytes_per_s / 1e9:.0f} GB/s;"
                     f" off by {off * 100:+.1f}%)")
    elif spec is None:
        checks.info(f"'{g.name}' is not in the known-GPU table: peak bandwidth not cross-checked")
    if g.peak_bandwidth_bytes_per_s is not None:
        checks.info(f"kvmon uses {g.peak_bandwidth_bytes_per_s / 1e9:.0f} GB/s (source: {g.bandwidth_source})")
    checks.info(f"PCIe gen {g.pcie.generation} x{g.pcie.width} now, gen {g.pcie.max_generation} x{g.pcie.max_width} "
                f"max → {(g.pcie.bandwidth_bytes_per_s or 0) / 1e9:.1f} GB/s per direction; "
                f"TX {g.pcie_tx_bytes_per_s} B/s, RX {g.pcie_rx_bytes_per_s} B/s")
    flat = {k: v for k, v in dataclasses.asdict(g).items() if k not in ("reasons", "pcie")}
    flat.update({f"pcie.{k}": v for k, v in dataclasses.asdict(g.pcie).items()})
    silent = [k for k, v in flat.items() if v is None and k != "bandwidth_source" and k not in FIELDS_NOT_READ
              and not (g.reasons.get(k) or g.reasons.get(k.split(".")[0]))]
    checks.check(not silent, "every unknown field gives a reason" + (f" (silent: {silent})" if silent else ""))
    for key, why in sorted(g.reasons.items()):
        checks.info(f"{key}: {why}")


def _raw_memory(index: int) -> Any:
    try:
        import pynvml

        return pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(index))
    except Exception:
        return None


def _copy_loop(empty: Any, copy: Any, sync: Any, seconds: float, result: dict[str, Any]) -> None:
    """Copy one 2 GiB device buffer into another for ``seconds``; store read + write bytes per second."""
    n = 2 * GIB // 4
    a, b = empty(n), empty(n)
    copy(b, a)
    sync()
    t0, copies = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        copy(b, a)
        copies += 1
        if copies % 20 == 0:
            sync()
    sync()
    result["copy_bytes_per_s"] = 2 * n * 4 * copies / (time.perf_counter() - t0)


def _start_load(seconds: float) -> tuple[threading.Thread, dict[str, Any]] | None:
    """Stream device memory with torch or cupy in a thread; None when neither is usable."""
    result: dict[str, Any] = {}
    args: tuple[Any, Any, Any] | None = None
    try:
        import torch

        if torch.cuda.is_available():
            args = (lambda n: torch.empty(n, dtype=torch.float32, device="cuda"),
                    lambda dst, src: dst.copy_(src), torch.cuda.synchronize)
            result["lib"] = "torch"
    except Exception:  # not installed, or installed without working CUDA libraries
        args = None
    if args is None:
        try:
            import cupy  # type: ignore[import-not-found]

            def _cupy_copy(dst: Any, src: Any) -> None:
                dst[...] = src

            args = (lambda n: cupy.empty(n, dtype=cupy.float32), _cupy_copy,
                    lambda: cupy.cuda.Device().synchronize())
            result["lib"] = "cupy"
        except Exception:
            return None
    empty, copy, sync = args

    def guarded() -> None:
        try:
            _copy_loop(empty, copy, sync, seconds, result)
        except Exception as exc:  # report, do not crash the smoke check
            result["error"] = f"{type(exc).__name__}: {exc}"

    thread = threading.Thread(target=guarded, daemon=True)
    thread.start()
    return thread, result


def _host_info(checks: Checks) -> None:
    """Host RAM and a measured host copy bandwidth, when psutil and numpy are installed (optional)."""
    import tempfile

    try:
        from kvmon.sources.host import HostSource

        with tempfile.TemporaryDirectory(prefix="kvmon-smoke-") as cache:
            host = HostSource(cache_dir=cache)
            t0 = time.perf_counter()
            bw = host.measure_bandwidth()
            took = time.perf_counter() - t0
            r = host.poll(server_pids=(os.getpid(),))
    except ImportError as exc:
        checks.info(f"host: skipped ({exc})")
        return
    ram, avail = (r.ram_total_bytes or 0) / GIB, (r.ram_available_bytes or 0) / GIB
    checks.info(f"host: RAM {ram:.1f} GiB, available {avail:.1f} GiB; copy bandwidth {bw / 1e9:.1f} GB/s "
                f"(measured in {took:.2f} s; source {r.host_bandwidth_source})")


# ------------------------------------------------------------------------------------ against nvidia-smi

MIB = 1024**2
# nvidia-smi's clocks event reason tags (``clocks_event_reason_*``; ``clocks_throttle_reason_*`` before 535), in
# kvmon's words (kvmon.core.readings.ClockReason)
SMI_REASONS = {"gpu_idle": "idle", "applications_clocks_setting": "applications_clocks", "sw_power_cap": "power_cap",
               "hw_slowdown": "hw_slowdown", "hw_thermal_slowdown": "thermal", "sw_thermal_slowdown": "thermal",
               "hw_power_brake_slowdown": "power_brake", "sync_boost": "sync_boost",
               "display_clocks_setting": "display"}


@dataclasses.dataclass
class SmiGpu:
    """What ``nvidia-smi -q -x`` says of one GPU (None where it says N/A or nothing)."""

    uuid: str | None = None
    name: str | None = None
    mem_clock_mhz: float | None = None
    mem_clock_max_mhz: float | None = None
    graphics_clock_mhz: float | None = None
    graphics_clock_max_mhz: float | None = None
    reasons: tuple[str, ...] | None = None
    pcie_gen: int | None = None
    pcie_max_gen: int | None = None
    pcie_width: int | None = None
    pcie_max_width: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    processes: dict[int, int] = dataclasses.field(default_factory=dict)  # pid -> used bytes


def _num(text: str | None) -> float | None:
    """"1410 MHz", "16x", "35.43 W", "4" → the number; "N/A", "[N/A]" or nothing → None."""
    if not text:
        return None
    head = text.strip().split()[0].rstrip("x") if text.strip() else ""
    try:
        return float(head)
    except ValueError:
        return None


def parse_smi(xml_text: str) -> list[SmiGpu]:
    """Every ``<gpu>`` of ``nvidia-smi -q -x``, old and new tag names alike."""
    root = ET.fromstring(xml_text)
    out = []
    for g in root.findall("gpu"):
        def text(path: str, g: ET.Element = g) -> str | None:
            node = g.find(path)
            return node.text if node is not None else None

        reasons_node = g.find("clocks_event_reasons")
        prefix = "clocks_event_reason_"
        if reasons_node is None:
            reasons_node, prefix = g.find("clocks_throttle_reasons"), "clocks_throttle_reason_"
        reasons = None
        if reasons_node is not None:
            active = {SMI_REASONS[c.tag.removeprefix(prefix)] for c in reasons_node
                      if c.tag.removeprefix(prefix) in SMI_REASONS and (c.text or "").strip() == "Active"}
            reasons = tuple(sorted(active))
        power = g.find("gpu_power_readings")
        if power is None:
            power = g.find("power_readings")
        procs = {}
        for p in g.findall("processes/process_info"):
            pid, used = _num(p.findtext("pid")), _num(p.findtext("used_memory"))
            if pid is not None and used is not None:
                procs[int(pid)] = int(used * MIB)
        gen, max_gen = _num(text("pci/pci_gpu_link_info/pcie_gen/current_link_gen")), _num(
            text("pci/pci_gpu_link_info/pcie_gen/max_link_gen"))
        width, max_width = _num(text("pci/pci_gpu_link_info/link_widths/current_link_width")), _num(
            text("pci/pci_gpu_link_info/link_widths/max_link_width"))
        limit = None
        if power is not None:
            limit = _num(power.findtext("current_power_limit")) or _num(power.findtext("enforced_power_limit"))
        out.append(SmiGpu(
            uuid=text("uuid"), name=text("product_name"), mem_clock_mhz=_num(text("clocks/mem_clock")),
            mem_clock_max_mhz=_num(text("max_clocks/mem_clock")),
            graphics_clock_mhz=_num(text("clocks/graphics_clock")),
            graphics_clock_max_mhz=_num(text("max_clocks/graphics_clock")), reasons=reasons,
            pcie_gen=int(gen) if gen is not None else None, pcie_max_gen=int(max_gen) if max_gen is not None else None,
            pcie_width=int(width) if width is not None else None,
            pcie_max_width=int(max_width) if max_width is not None else None,
            power_w=_num(power.findtext("power_draw")) if power is not None else None, power_limit_w=limit,
            processes=procs))
    return out


def fake_smi_xml(fake: Any) -> str:
    """What ``nvidia-smi -q -x`` would answer for the fake NVML's GPUs now (the driver 550 layout)."""
    import pynvml

    root = ET.Element("nvidia_smi_log")
    for gpu in fake.gpus:
        g = ET.SubElement(root, "gpu")
        ET.SubElement(g, "product_name").text = gpu.name
        ET.SubElement(g, "uuid").text = gpu.uuid
        link = ET.SubElement(ET.SubElement(g, "pci"), "pci_gpu_link_info")
        gen, widths = ET.SubElement(link, "pcie_gen"), ET.SubElement(link, "link_widths")
        ET.SubElement(gen, "max_link_gen").text = str(gpu.pcie_max_gen)
        ET.SubElement(gen, "current_link_gen").text = str(gpu.pcie_gen)
        ET.SubElement(widths, "max_link_width").text = f"{gpu.pcie_max_width}x"
        ET.SubElement(widths, "current_link_width").text = f"{gpu.pcie_width}x"
        reasons = ET.SubElement(g, "clocks_event_reasons")
        bits = {"gpu_idle": pynvml.nvmlClocksEventReasonGpuIdle, "sw_power_cap": pynvml.nvmlClocksEventReasonSwPowerCap,
                "hw_slowdown": pynvml.nvmlClocksEventReasonHwSlowdown,
                "sw_thermal_slowdown": pynvml.nvmlClocksEventReasonSwThermalSlowdown,
                "hw_thermal_slowdown": pynvml.nvmlClocksEventReasonHwThermalSlowdown}
        for tag, bit in bits.items():
            ET.SubElement(reasons, f"clocks_event_reason_{tag}").text = (
                "Active" if gpu.clocks_event_reasons & bit else "Not Active")
        power = ET.SubElement(g, "gpu_power_readings")
        ET.SubElement(power, "power_draw").text = f"{gpu.power_mw / 1000:.2f} W"
        ET.SubElement(power, "current_power_limit").text = f"{gpu.power_limit_mw / 1000:.2f} W"
        for tag, now, top in (("graphics_clock", gpu.core_clock_mhz, gpu.core_clock_max_mhz),
                              ("mem_clock", gpu.mem_clock_mhz, gpu.mem_clock_max_mhz)):
            ET.SubElement(g.find("clocks") if g.find("clocks") is not None else ET.SubElement(g, "clocks"),
                          tag).text = f"{now} MHz"
            ET.SubElement(g.find("max_clocks") if g.find("max_clocks") is not None else ET.SubElement(g, "max_clocks"),
                          tag).text = f"{top} MHz"
        procs = ET.SubElement(g, "processes")
        for pid, used in gpu.processes:
            info = ET.SubElement(procs, "process_info")
            ET.SubElement(info, "pid").text = str(pid)
            ET.SubElement(info, "used_memory").text = f"{(used or 0) // MIB} MiB" if used is not None else "N/A"
    return ET.tostring(root, encoding="unicode")


def run_smi() -> tuple[str | None, str | None]:
    """(``nvidia-smi -q -x``'s XML, None) or (None, why not)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, "nvidia-smi is not on PATH"
    try:
        done = subprocess.run([exe, "-q", "-x"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"nvidia-smi did not answer: {exc}"
    if done.returncode != 0:
        return None, f"nvidia-smi exited {done.returncode}: {done.stderr.strip()[:200]}"
    return done.stdout, None


# A child that holds GPU memory and keeps it busy through the CUDA driver API (no toolkit, no compiler): it says
# READY once the memory is allocated, and exits after the given seconds or when its stdin closes.
ALLOCATOR = r"""
import ctypes, sys, time
cuda = ctypes.CDLL("libcuda.so.1")
def ok(name, *args):
    rc = getattr(cuda, name)(*args)
    if rc != 0:
        print(f"FAILED {name} returned CUDA error {rc}", flush=True)
        sys.exit(1)
size, seconds = int(sys.argv[1]), float(sys.argv[2])
dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
ok("cuInit", 0)
ok("cuDeviceGet", ctypes.byref(dev), 0)
ok("cuCtxCreate_v2", ctypes.byref(ctx), 0, dev)
ok("cuMemAlloc_v2", ctypes.byref(ptr), ctypes.c_size_t(size))
print("READY", flush=True)
end, i = time.monotonic() + seconds, 0
while time.monotonic() < end:
    ok("cuMemsetD8_v2", ptr, ctypes.c_ubyte(i & 0xFF), ctypes.c_size_t(size))
    ok("cuCtxSynchronize")
    i += 1
ok("cuMemFree_v2", ptr)
print("DONE", flush=True)
"""


def start_allocator(gib: float, seconds: float) -> tuple[subprocess.Popen[str] | None, str]:
    """The allocating child, once its memory is held (None, why: no libcuda, an error, no answer in 60 s)."""
    proc = subprocess.Popen([sys.executable, "-c", ALLOCATOR, str(int(gib * GIB)), str(seconds)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    line = ""
    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline and proc.poll() is None:
        line = proc.stdout.readline()
        if line.startswith(("READY", "FAILED")):
            break
    if not line.startswith("READY"):
        proc.kill()
        rest = (proc.stdout.read() or "").strip().splitlines()
        why = (line.strip() or (rest[-1] if rest else "") or "no answer").strip()
        return None, f"the CUDA driver API allocation did not start: {why}"
    return proc, f"pid {proc.pid} holds {gib:g} GiB through cuMemAlloc and keeps it busy with cuMemsetD8"


def _same(a: float | None, b: float | None, tol: float) -> bool:
    return a is not None and b is not None and abs(a - b) <= tol


def compare_with_smi(before: Any, after: Any, smi: SmiGpu, checks: Checks, other: tuple[int, int] | None) -> None:
    """kvmon's reading of one GPU beside nvidia-smi's, a line each; nvidia-smi ran between kvmon's two readings
    (``before``, ``after``), so a value that moves (a clock, a reason, the power) matches either. ``other``: (pid,
    bytes) of the allocating child, which kvmon must count as another program's memory."""
    checks.lines.append(f"GPU {before.index} against nvidia-smi ({smi.name}):")

    def line(ok: bool, what: str, ours: Any, theirs: Any) -> None:
        checks.check(ok, f"{what:<26} kvmon {ours!s:>14}   nvidia-smi {theirs!s:>14}")

    def fmt(v: Any) -> str:
        return "—" if v is None else f"{v:g}" if isinstance(v, float) else str(v)

    pairs = [
        ("memory clock now (MHz)", lambda g: g.mem_clock_mhz, smi.mem_clock_mhz, 0.02),
        ("memory clock max (MHz)", lambda g: g.mem_clock_max_mhz, smi.mem_clock_max_mhz, 0.0),
        ("graphics clock now (MHz)", lambda g: g.core_clock_mhz, smi.graphics_clock_mhz, 0.10),
        ("graphics clock max (MHz)", lambda g: g.core_clock_max_mhz, smi.graphics_clock_max_mhz, 0.0),
        ("PCIe generation now", lambda g: g.pcie.generation, smi.pcie_gen, 0.0),
        ("PCIe generation max", lambda g: g.pcie.max_generation, smi.pcie_max_gen, 0.0),
        ("PCIe width now", lambda g: g.pcie.width, smi.pcie_width, 0.0),
        ("PCIe width max", lambda g: g.pcie.max_width, smi.pcie_max_width, 0.0),
        ("power drawn (W)", lambda g: g.power_w, smi.power_w, 0.15),
        ("power limit (W)", lambda g: g.power_limit_w, smi.power_limit_w, 0.0),
    ]
    for what, get, theirs, rel in pairs:
        ours = [get(before), get(after)]
        if theirs is None:
            checks.info(f"{what:<26} kvmon {fmt(ours[-1]):>14}   nvidia-smi says N/A here")
            continue
        tol = max(1.0, rel * theirs)
        line(any(_same(o, theirs, tol) for o in ours), what, " / ".join(dict.fromkeys(fmt(o) for o in ours)),
             fmt(theirs))
    ours_reasons = [tuple(sorted(set(g.clock_reasons))) if g.clock_reasons is not None else None
                    for g in (before, after)]
    if smi.reasons is not None:
        line(smi.reasons in ours_reasons, "clocks held down by",
             " / ".join(dict.fromkeys(", ".join(r or ()) or "nothing" for r in ours_reasons)),
             ", ".join(smi.reasons) or "nothing")
    if other is not None:
        pid, size = other
        theirs_b = smi.processes.get(pid)
        ours_b = next((p.used_bytes for p in after.processes or () if p.pid == pid), None)
        line(ours_b is not None and theirs_b is not None and abs(ours_b - theirs_b) <= 2 * MIB,
             f"pid {pid} memory (MiB)", fmt(None if ours_b is None else round(ours_b / MIB)),
             fmt(None if theirs_b is None else round(theirs_b / MIB)))
        others = after.other_processes_used_bytes
        checks.check(others is not None and others >= size, f"kvmon counts it among other programs' memory "
                     f"({(others or 0) / GIB:.2f} GiB, at least the {size / GIB:.2f} GiB it holds)")
        if after.other_processes_busy_percent is not None:
            checks.info(f"other programs' share of the GPU's time: {after.other_processes_busy_percent:.0f}%")


def smi_phase(source: NvmlSource, fake: Any, args: argparse.Namespace, checks: Checks) -> None:
    """kvmon's readings and nvidia-smi's at the same moment, with another process holding memory at load."""
    pid = os.getpid()
    child, other, note = None, None, ""
    if fake is not None:
        size = int(args.other_gib * GIB)
        fake.update(0, processes=[*fake.gpus[0].processes, (4_000_123, size)],
                    process_busy_percent={4_000_123: 80.0}, memory_used_bytes=fake.gpus[0].memory_used_bytes + size)
        other, note = (4_000_123, size), "a fake process holds the memory (the dry run)"
    elif args.other_gib > 0:
        child, note = start_allocator(args.other_gib, args.load_seconds + 20.0)
        if child is not None:
            other = (child.pid, int(args.other_gib * GIB))
            time.sleep(2.0)  # the clocks rise with the load
    checks.lines.append(f"against nvidia-smi -q -x: {note or 'no other process (--other-gib 0)'}")
    try:
        before = source.poll(server_pids=(pid,))
        xml_text, why = (fake_smi_xml(fake), None) if fake is not None else run_smi()
        after = source.poll(server_pids=(pid,))
    finally:
        if child is not None:
            child.kill()
            child.wait(10)
    if xml_text is None:
        checks.check(False, f"nvidia-smi's answer: {why}")
        return
    smi = parse_smi(xml_text)
    by_uuid = {s.uuid: s for s in smi}
    for g, g2 in zip(before.gpus, after.gpus, strict=False):
        match = by_uuid.get(g.uuid) or (smi[g.index] if g.index < len(smi) else None)
        if match is None:
            checks.check(False, f"GPU {g.index} ({g.uuid}) is not in nvidia-smi's answer")
            continue
        compare_with_smi(g, g2, match, checks, other if g.index == 0 else None)


def main(argv: list[str] | None = None) -> int:
    """Poll every GPU, print the readings as JSON and the checks; 1 when a consistency check fails."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-load", action="store_true", help="skip the optional device-memory load (torch/cupy)")
    parser.add_argument("--load-seconds", type=float, default=4.0)
    parser.add_argument("--no-host", action="store_true", help="skip host RAM and the host copy benchmark")
    parser.add_argument("--fake", action="store_true", help="run the checks on kvmon's fake NVML (a dry run)")
    parser.add_argument("--other-gib", type=float, default=2.0,
                        help="GiB another process allocates with the CUDA driver API for the nvidia-smi comparison")
    parser.add_argument("--no-smi", action="store_true", help="skip the comparison with nvidia-smi -q")
    parser.add_argument("--require-gpu", action="store_true", help="a machine without an NVIDIA GPU is a failure "
                        "(exit 2), not a pass")
    args = parser.parse_args(argv)
    t_start = time.perf_counter()
    try:
        import pynvml  # noqa: F401
    except ImportError:
        print("gpu_smoke: nvidia-ml-py is not installed (pip install nvidia-ml-py); nothing to check.")
        return 2 if args.require_gpu else 0
    fake = None
    if args.fake:
        from kvmon.sim.fake_nvml import FakeGpu, FakeNvml
        from kvmon.sim.permit import allow

        allow("benchmark")  # its fake GPUs stand in for the machine

        fake = FakeNvml([FakeGpu(uuid="GPU-4090-0000", memory_used_bytes=3 * GIB, memory_reserved_bytes=GIB // 2,
                                 processes=[(os.getpid(), 3 * GIB)], mem_clock_mhz=6300, core_clock_mhz=1900,
                                 clocks_event_reasons=4, pcie_gen=4, pcie_width=8, power_mw=449_000),
                         FakeGpu(name="NVIDIA H200", uuid="GPU-h200-0001", memory_total_bytes=141 * 10**9,
                                 mem_clock_max_mhz=3201, mem_clock_mhz=3201,
                                 bus_width_bits=6144, dram_bw_util_percent=12.0)])
        args.no_load = True
    source = NvmlSource(fake)
    pid = os.getpid()
    t0 = time.perf_counter()
    first = source.poll(server_pids=(pid,))
    first_ms = (time.perf_counter() - t0) * 1000
    if first.unavailable_reason is not None:
        if args.require_gpu:
            print(f"gpu_smoke: FAILED: {first.unavailable_reason} (--require-gpu: this machine should have one)",
                  file=sys.stderr)
            return 2
        print(f"gpu_smoke: {first.unavailable_reason}. Nothing to check on this machine.")
        return 0
    time.sleep(1.0)  # GPM needs two samples some time apart
    poll_ms: list[float] = []
    for _ in range(5):
        t0 = time.perf_counter()
        reading = source.poll(server_pids=(pid,))
        poll_ms.append((time.perf_counter() - t0) * 1000)
    print(json.dumps(json_safe(dataclasses.asdict(reading)), indent=2, allow_nan=False))

    checks = Checks()
    checks.lines.append(f"driver {reading.driver_version}; {len(reading.gpus)} GPU(s); first poll {first_ms:.1f} ms "
                        f"(NVML init included), then {min(poll_ms):.1f}–{max(poll_ms):.1f} ms per poll of all GPUs")
    for g in reading.gpus:
        _check_gpu(g, None if fake is not None else _raw_memory(g.index), checks)

    load = None if args.no_load else _start_load(args.load_seconds)
    if load is None:
        checks.info("no load run (--no-load, or neither torch nor cupy with CUDA is installed)")
    else:
        thread, result = load
        samples = []
        deadline = time.perf_counter() + args.load_seconds + 30
        time.sleep(min(1.5, args.load_seconds / 2))
        while thread.is_alive() and time.perf_counter() < deadline:
            samples.append(source.poll(server_pids=(pid,)).gpus[0])
            time.sleep(0.5)
        thread.join(timeout=max(0.0, deadline - time.perf_counter()))
        if "error" in result:
            checks.info(f"load failed: {result['error']}")
        elif samples and "copy_bytes_per_s" in result:
            g = samples[-1]
            peak = g.peak_bandwidth_bytes_per_s
            copy = result["copy_bytes_per_s"]
            share = f" = {copy / peak * 100:.0f}% of kvmon's peak" if peak else ""
            checks.info(f"{result['lib']} device copy on GPU 0: {copy / 1e9:.0f} GB/s (read + write){share}")
            dram = [s.dram_bandwidth_util_percent for s in samples if s.dram_bandwidth_util_percent is not None]
            busy = [s.memory_busy_percent for s in samples if s.memory_busy_percent is not None]
            checks.info(f"during the load: GPM DRAM utilisation {dram or g.reasons.get('dram_bandwidth_util_percent')}"
                        f"; memory duty cycle {busy}")
            held = max((s.server_used_bytes or 0) for s in samples)
            checks.info(f"this process (as the 'server') holds {held / GIB:.2f} GiB on GPU 0 per NVML "
                        f"({g.reasons.get('server_used_bytes', 'attributed')})")
            checks.check(any(s.vram_used_bytes is not None for s in samples), "readings kept coming during the load")
    if not args.no_smi:
        smi_phase(source, fake, args, checks)
    source.close()
    if not args.no_host:
        _host_info(checks)
    checks.lines.append(f"total {time.perf_counter() - t_start:.1f} s; {checks.failed} check(s) failed")
    print("\n".join(checks.lines))
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
