"""bench/gpu_smoke.py runs on a machine without a GPU (exit 0, says so) and its checks pass on the fake NVML."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "gpu_smoke.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120,
                          cwd=SCRIPT.parent)


def test_without_a_gpu_it_says_so_and_exits_0() -> None:
    from kvmon.sources.nvml import NvmlSource

    if NvmlSource().poll().unavailable_reason is None:
        pytest.skip("a real NVIDIA GPU is present: the full run is the bench, not a unit test")
    out = _run()
    assert out.returncode == 0, out.stderr
    assert "no NVIDIA GPU" in out.stdout and "Nothing to check" in out.stdout


def test_dry_run_on_the_fake_prints_json_and_passes() -> None:
    out = _run("--fake", "--no-load", "--no-host")
    assert out.returncode == 0, out.stdout + out.stderr
    document = out.stdout[: out.stdout.index("\ndriver ")]
    reading = json.loads(document)
    assert [g["name"] for g in reading["gpus"]] == ["NVIDIA GeForce RTX 4090", "NVIDIA H200"]
    assert "0 check(s) failed" in out.stdout and "[FAIL]" not in out.stdout
    assert "NVML peak within 10% of the table (H200: 4800 GB/s; off by +2.4%)" in out.stdout


def test_without_a_gpu_require_gpu_fails_clearly() -> None:
    from kvmon.sources.nvml import NvmlSource

    if NvmlSource().poll().unavailable_reason is None:
        pytest.skip("a real NVIDIA GPU is present")
    out = _run("--require-gpu")
    assert out.returncode == 2 and "Traceback" not in out.stdout + out.stderr
    assert out.stderr.startswith("gpu_smoke: FAILED: no NVIDIA GPU")


def test_dry_run_compares_clocks_reasons_link_power_and_another_process_with_nvidia_smi() -> None:
    out = _run("--fake", "--no-load", "--no-host")
    assert out.returncode == 0, out.stdout + out.stderr
    section = out.stdout[out.stdout.index("against nvidia-smi -q -x"):]
    for what in ("memory clock now (MHz)     kvmon           6300   nvidia-smi           6300",
                 "clocks held down by        kvmon      power_cap   nvidia-smi      power_cap",
                 "PCIe width now             kvmon              8   nvidia-smi              8",
                 "power drawn (W)            kvmon            449   nvidia-smi            449",
                 "pid 4000123 memory (MiB)   kvmon           2048   nvidia-smi           2048"):
        assert f"[ok] {what}" in section, what
    assert "kvmon counts it among other programs' memory" in section


def _smoke_module():  # type: ignore[no-untyped-def]
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_smoke", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_smoke"] = module  # its dataclasses look their module up while they are made
    spec.loader.exec_module(module)
    return module


OLD_DRIVER_XML = """<?xml version="1.0" ?>
<nvidia_smi_log><driver_version>525.147.05</driver_version>
<gpu id="00000000:01:00.0"><product_name>NVIDIA A100-SXM4-80GB</product_name><uuid>GPU-a100</uuid>
<pci><pci_gpu_link_info><pcie_gen><max_link_gen>4</max_link_gen><current_link_gen>1</current_link_gen></pcie_gen>
<link_widths><max_link_width>16x</max_link_width><current_link_width>16x</current_link_width></link_widths>
</pci_gpu_link_info></pci>
<clocks_throttle_reasons><clocks_throttle_reason_gpu_idle>Active</clocks_throttle_reason_gpu_idle>
<clocks_throttle_reason_sw_power_cap>Not Active</clocks_throttle_reason_sw_power_cap>
<clocks_throttle_reason_hw_thermal_slowdown>Active</clocks_throttle_reason_hw_thermal_slowdown>
</clocks_throttle_reasons>
<power_readings><power_draw>61.38 W</power_draw><enforced_power_limit>400.00 W</enforced_power_limit></power_readings>
<clocks><graphics_clock>210 MHz</graphics_clock><mem_clock>1593 MHz</mem_clock></clocks>
<max_clocks><graphics_clock>1410 MHz</graphics_clock><mem_clock>N/A</mem_clock></max_clocks>
<processes><process_info><pid>4242</pid><used_memory>1234 MiB</used_memory></process_info></processes>
</gpu></nvidia_smi_log>"""


def test_nvidia_smi_xml_of_an_older_driver_is_read() -> None:
    (g,) = _smoke_module().parse_smi(OLD_DRIVER_XML)
    assert (g.uuid, g.mem_clock_mhz, g.mem_clock_max_mhz, g.graphics_clock_max_mhz) == ("GPU-a100", 1593.0, None,
                                                                                       1410.0)
    assert g.reasons == ("idle", "thermal") and (g.pcie_gen, g.pcie_max_gen, g.pcie_width) == (1, 4, 16)
    assert (g.power_w, g.power_limit_w, g.processes) == (61.38, 400.0, {4242: 1234 * 1024**2})


def test_the_cuda_allocation_without_a_driver_says_why() -> None:
    from kvmon.sources.nvml import NvmlSource

    if NvmlSource().poll().unavailable_reason is None:
        pytest.skip("a real NVIDIA GPU is present")
    proc, why = _smoke_module().start_allocator(0.01, 1.0)
    assert proc is None and why.startswith("the CUDA driver API allocation did not start: ")
    assert "Traceback" not in why
