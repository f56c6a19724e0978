"""GPU power and energy from hwmon files as amdgpu, xe and i915 publish them, looked for once a while."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvmon.sources.sysfs import hwmon_power


def _hwmon(dev: Path, **files: str) -> None:
    d = dev / "hwmon" / "hwmon3"
    d.mkdir(parents=True)
    for name, value in files.items():
        (d / name).write_text(value + "\n")


def test_hwmon_power_and_energy_as_amdgpu_xe_and_i915_publish_them(tmp_path: Path) -> None:
    amd, xe, bare = tmp_path / "amd", tmp_path / "xe", tmp_path / "bare"
    _hwmon(amd, power1_average="33000000", name="amdgpu")  # RDNA2: the average, in µW
    _hwmon(xe, energy1_input="1234567890", power1_max="190000000")  # xe: an energy counter in µJ, no power
    bare.mkdir()
    assert hwmon_power(amd) == (33.0, None, {"energy_j": "the card's hwmon has no energy file"})
    assert hwmon_power(xe)[:2] == (None, pytest.approx(1234.56789))
    assert "no hwmon sensors" in hwmon_power(bare)[2]["power_w"]


def test_hwmon_files_are_looked_for_once_a_while_and_again_when_one_stops_reading(tmp_path: Path) -> None:
    """A poll reads the chosen files only: a file that appears is seen at the next look (RELIST_S later); a
    driver reload that renumbers the hwmon folder is followed in the same poll."""
    from kvmon.sources.sysfs import RELIST_S

    now = [100.0]
    dev = tmp_path / "card"
    _hwmon(dev, power1_average="33000000")
    assert hwmon_power(dev, clock=lambda: now[0])[:2] == (33.0, None)
    (dev / "hwmon" / "hwmon3" / "energy1_input").write_text("5000000\n")  # readable from now on
    (dev / "hwmon" / "hwmon3" / "power1_average").write_text("41000000\n")
    now[0] += RELIST_S - 1
    power, energy, reasons = hwmon_power(dev, clock=lambda: now[0])
    assert (power, energy) == (41.0, None) and "no energy file" in reasons["energy_j"]  # not looked for yet
    now[0] += 1
    assert hwmon_power(dev, clock=lambda: now[0]) == (41.0, 5.0, {})
    (dev / "hwmon" / "hwmon3").rename(dev / "hwmon" / "hwmon4")  # the driver reloaded
    assert hwmon_power(dev, clock=lambda: now[0]) == (41.0, 5.0, {})
    for f in (dev / "hwmon" / "hwmon4").iterdir():
        f.unlink()
    (dev / "hwmon" / "hwmon4").rmdir()
    power, energy, reasons = hwmon_power(dev, clock=lambda: now[0])
    assert (power, energy) == (None, None) and "no hwmon sensors" in reasons["power_w"]
