"""Why an AMD or Intel card holds its clocks down, from the files its driver publishes (real sysfs snapshots,
tests/fixtures/sysfs, with the hwmon and frequency files of each case written in)."""

from __future__ import annotations

import shutil
from pathlib import Path

from kvmon.sources.amdgpu import AmdGpuSource
from kvmon.sources.intel_gpu import IntelGpuSource

FIX = Path(__file__).parents[1] / "fixtures" / "sysfs"


def _root(tmp_path: Path, card: str) -> Path:
    root = tmp_path / card
    shutil.copytree(FIX / card, root, symlinks=True)
    return root


def _write(folder: Path, **files: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text + "\n")


def _amd(tmp_path: Path, **hwmon: str):  # type: ignore[no-untyped-def]
    root = _root(tmp_path, "rx6900xt")
    dev = root / "sys" / "class" / "drm" / "card0" / "device"
    (dev / "pp_dpm_mclk").write_text("0: 96Mhz \n1: 456Mhz *\n2: 673Mhz \n3: 1000Mhz \n")
    if hwmon:
        _write(dev / "hwmon" / "hwmon3", **hwmon)
    (g,) = AmdGpuSource(root).poll().gpus
    return g


def test_amd_memory_clock_down_at_the_power_cap(tmp_path: Path) -> None:
    g = _amd(tmp_path, power1_average="281000000", power1_cap="289000000", temp1_input="70000",
             temp1_crit="100000")
    assert (g.mem_clock_mhz, g.mem_clock_max_mhz) == (456.0, 1000.0)
    assert g.clock_reasons == ("power_cap",)


def test_amd_memory_hot_is_thermal(tmp_path: Path) -> None:
    g = _amd(tmp_path, power1_average="120000000", power1_cap="289000000", temp3_input="103000",
             temp3_crit="105000")
    assert g.clock_reasons == ("thermal",)


def test_amd_within_its_limits_says_none_and_without_hwmon_says_unknown(tmp_path: Path) -> None:
    assert _amd(tmp_path / "a", power1_average="120000000", power1_cap="289000000").clock_reasons == ()
    assert _amd(tmp_path / "b").clock_reasons is None


def test_xe_graphics_clock_and_its_throttle_reasons(tmp_path: Path) -> None:
    root = _root(tmp_path, "b580")
    freq = root / "sys" / "class" / "drm" / "card1" / "device" / "tile0" / "gt0" / "freq0"
    _write(freq, act_freq="1850", cur_freq="1850", rp0_freq="2850", max_freq="2850")
    _write(freq / "throttle", status="1", reason_pl1="1", reason_pl2="0", reason_pl4="0", reason_thermal="0",
           reason_prochot="0", reason_ratl="0", reason_vr_thermalert="0", reason_vr_tdc="0")
    (g,) = IntelGpuSource(root).poll().gpus
    assert (g.core_clock_mhz, g.core_clock_max_mhz, g.clock_reasons) == (1850.0, 2850.0, ("power_cap",))


def test_i915_graphics_clock_and_its_throttle_reasons(tmp_path: Path) -> None:
    root = _root(tmp_path, "a380-i915")
    card = next((root / "sys" / "class" / "drm").glob("card[0-9]"))
    _write(card / "gt" / "gt0", rps_act_freq_mhz="1200", rps_RP0_freq_mhz="2450", throttle_reason_thermal="1",
           throttle_reason_pl1="0", throttle_reason_vr_tdc="1")
    (g,) = IntelGpuSource(root).poll().gpus
    assert (g.core_clock_mhz, g.core_clock_max_mhz) == (1200.0, 2450.0)
    assert g.clock_reasons == ("thermal", "current_limit")


def test_intel_without_frequency_files_says_why(tmp_path: Path) -> None:
    (g,) = IntelGpuSource(_root(tmp_path, "a380-xe")).poll().gpus
    assert g.clock_reasons is None and "throttle reasons" in g.reasons["clock_reasons"]
