"""The energy line on the dashboard: the power now, joules per token and the session's Wh, and what it says when the
CPU's energy cannot be read."""

from __future__ import annotations

import os


def test_a_cpu_only_server_without_readable_rapl_says_why_on_the_dashboard() -> None:
    from kvmon.core.snapshot import Connection, ConnectionStatus, Snapshot
    from kvmon.gui.panels.energy import energy_text

    why = "/sys/class/powercap/intel-rapl:0/energy_uj is readable by root only on this system"
    s = Snapshot(seq=1, t_monotonic=0.0, t_wall=0.0, connection=Connection(ConnectionStatus.CONNECTED),
                 reasons={"energy": f"the model runs partly or wholly on the CPU, whose energy is not readable "
                                    f"({why})"})
    line, tip = energy_text(s)
    assert line.startswith("not known: ") and "root only" in line and "RAPL" in tip


def test_the_dashboard_shows_the_energy_line() -> None:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from stories import Watch
    from story_window import watch_in_window

    lines: list[str] = []
    watch_in_window("seed-3090x2", Watch(60.0, 80.0, step_s=2.0),
                    on_poll=lambda win, _seen: lines.append(win.energy.label.text()))  # type: ignore[attr-defined]
    before = next(x for x in lines if " J/token · " in x)  # no reply ended yet: the session's tokens per Wh
    assert " W now · " in before and "tokens/Wh · " in before and "Wh this session" in before
    # a reply ended: its J/token beside the session's (tokens per Wh goes to the tooltip, so the line still fits)
    assert " W now · " in lines[-1] and " J/token (last reply " in lines[-1] and "Wh this session" in lines[-1]
