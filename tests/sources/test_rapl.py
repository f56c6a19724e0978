"""The CPU's energy from Linux RAPL counters: the package counter and its wrap, the zones listed once a while, and why
it cannot be read (root only, no RAPL, macOS)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from kvmon.sources.rapl import cpu_energy


def _rapl(root: Path, uj: str | None, wrap: str = "262143328850") -> Path:
    zone = root / "sys" / "class" / "powercap" / "intel-rapl:0"
    (zone / "intel-rapl:0:0").mkdir(parents=True)  # the cores sub-zone: not a package, not counted
    (zone / "intel-rapl:0:0" / "energy_uj").write_text("999\n")
    if uj is not None:
        (zone / "energy_uj").write_text(uj + "\n")
    (zone / "max_energy_range_uj").write_text(wrap + "\n")
    return zone


def test_rapl_package_counter_and_its_wrap(tmp_path: Path) -> None:
    _rapl(tmp_path, "52745862375")
    assert cpu_energy(tmp_path, "linux") == (pytest.approx(52745.862375), pytest.approx(262143.32885), None)


def test_rapl_zones_are_listed_once_a_while_and_again_when_one_stops_reading(tmp_path: Path) -> None:
    """Each poll reads the counters only: a second package appearing is counted from the next listing
    (RELIST_S later); a zone that goes makes the same read list them again."""
    from kvmon.sources.sysfs import RELIST_S

    now = [50.0]
    zone = _rapl(tmp_path, "1000000")
    assert cpu_energy(tmp_path, "linux", clock=lambda: now[0])[0] == pytest.approx(1.0)
    second = zone.parent / "intel-rapl:1"
    second.mkdir()
    (second / "energy_uj").write_text("2000000\n")
    assert cpu_energy(tmp_path, "linux", clock=lambda: now[0])[0] == pytest.approx(1.0)  # not listed yet
    now[0] += RELIST_S
    assert cpu_energy(tmp_path, "linux", clock=lambda: now[0])[:2] == (pytest.approx(3.0), None)  # two: no wrap
    (second / "energy_uj").unlink()
    second.rmdir()
    assert cpu_energy(tmp_path, "linux", clock=lambda: now[0])[:2] == (pytest.approx(1.0), pytest.approx(262143.32885))


def test_a_counter_that_cannot_be_read_is_not_a_reason_to_list_the_zones_again(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A counter that is there but unreadable (root only on most systems, or not a number) stays so until the next
    listing: each read reads it, without listing the folder again; a counter that is gone lists them at once."""
    import kvmon.sources.rapl as rapl

    listings: list[Path] = []
    real = rapl._package_zones
    monkeypatch.setattr(rapl, "_package_zones", lambda base: listings.append(base) or real(base))
    zone = _rapl(tmp_path, "lots")
    for _ in range(5):
        assert "does not hold a count" in cpu_energy(tmp_path, "linux", clock=lambda: 10.0)[2]
    assert len(listings) == 1
    (zone / "energy_uj").unlink()
    assert "has no energy_uj counter" in cpu_energy(tmp_path, "linux", clock=lambda: 10.0)[2]
    assert len(listings) == 2


def test_no_rapl_and_macos_say_why(tmp_path: Path) -> None:
    assert "no RAPL energy counters" in cpu_energy(tmp_path, "linux")[2]
    assert "powermetrics, which needs root" in cpu_energy(tmp_path, "darwin")[2]
    zone = _rapl(tmp_path, None)
    assert "has no energy_uj counter" in cpu_energy(tmp_path, "linux")[2]
    (zone / "energy_uj").write_text("lots\n")
    assert "does not hold a count" in cpu_energy(tmp_path, "linux")[2]


def test_a_root_only_rapl_counter_is_said_so() -> None:
    """As most distributions ship it since 2020: energy_uj mode 0400, owned by root, read by an ordinary user (as
    root, this test reads it with the effective user id of nobody)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.chmod(root, 0o755)
        zone = _rapl(root, "52745862375")
        for d in (zone, *zone.parents):
            if d == root:
                break
            os.chmod(d, 0o755)
        os.chmod(zone / "energy_uj", 0o400)
        if os.geteuid() == 0:
            os.seteuid(65534)
            try:
                energy, _wrap, why = cpu_energy(root, "linux")
            finally:
                os.seteuid(0)
        else:
            energy, _wrap, why = cpu_energy(root, "linux")
    assert energy is None and why is not None and "readable by root only" in why
