"""The energy line on the dashboard: what it says when the CPU's energy cannot be read."""

from __future__ import annotations


def test_a_cpu_only_server_without_readable_rapl_says_why_on_the_dashboard() -> None:
    from kvmon.core.snapshot import Connection, ConnectionStatus, Snapshot
    from kvmon.gui.panels.energy import energy_text

    why = "/sys/class/powercap/intel-rapl:0/energy_uj is readable by root only on this system"
    s = Snapshot(seq=1, t_monotonic=0.0, t_wall=0.0, connection=Connection(ConnectionStatus.CONNECTED),
                 reasons={"energy": f"the model runs partly or wholly on the CPU, whose energy is not readable "
                                    f"({why})"})
    line, tip = energy_text(s)
    assert line.startswith("not known: ") and "root only" in line and "RAPL" in tip
