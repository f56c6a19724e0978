"""The free-VRAM trend: another program's steady growth is VRAM running out; the server's own load is a step, not a
trend (a router loading its model, a reload, another model followed)."""

from __future__ import annotations

from analysis_readings import GIB, FixedRates, gpu, gpus, reading

from kvmon.core.analysis import Analyzer

MIB = 1024**2


def _vram_alerts(steps: list[tuple[float, int, int, int]]) -> list[tuple[float, str]]:
    """(t, free, server, others) polls through one analyzer; the times and levels of the VRAM alert."""
    a = Analyzer(rate_tracker=FixedRates(decode=40.0))
    out = []
    for t, free, server, others in steps:
        s = a.update(reading(t), gpus(t, gpu(free=free, server=server, others=others)))
        out += [(t, x.level.value) for x in s.alerts if x.code == "vram_full_soon"]
    return out


def test_the_servers_own_load_is_not_vram_running_out() -> None:
    """The model loads over 8 s (its server's VRAM grows 0 → 10 GiB, free falls 23 → 13 GiB), then stands: free VRAM
    fell fast for a moment, and nothing else is taking it; no warning that VRAM will be full."""
    steps = []
    for i in range(120):
        t = float(i)
        server = min(10 * GIB, int(10 * GIB * i / 8))
        steps.append((t, 23 * GIB - server, server, 1 * GIB))
    assert _vram_alerts(steps) == []


def test_a_reload_then_another_programs_growth_still_warns() -> None:
    """After a reload (the server's VRAM drops to nothing and comes back), another program growing 50 MiB/s from
    12 GiB free is VRAM running out: the warning rises well before it is gone."""
    steps = []
    for i in range(30):  # loaded and steady
        steps.append((float(i), 12 * GIB, 10 * GIB, 1 * GIB))
    for i in range(30, 36):  # the reload
        steps.append((float(i), 22 * GIB, 0, 1 * GIB))
    for i in range(36, 300):  # loaded again; another program grows from t = 60
        grow = max(0, i - 60) * 50 * MIB
        if 12 * GIB - grow <= 0:
            break
        steps.append((float(i), 12 * GIB - grow, 10 * GIB, 1 * GIB + grow))
    raised = _vram_alerts(steps)
    assert raised, "the other program's growth raised no VRAM warning"
    first = raised[0][0]
    assert first >= 60  # not from the reload
    assert (12 * GIB - (first - 60) * 50 * MIB) / (50 * MIB) >= 60  # a minute or more before it runs out


def test_another_models_load_or_a_blip_is_a_step_not_a_trend() -> None:
    """A router's other model loads (other processes 0 → 9.6 GiB over 10 s, then steady), and later a model that fails
    takes 0.4 GiB for a second: free VRAM fell, twice, and stands; neither is VRAM running out."""
    steps = []
    for i in range(150):
        t = float(i)
        others = min(max(0.0, (i - 30) / 10), 1.0) * 9.6 * GIB + (0.4 * GIB if i == 90 else 0.0)
        steps.append((t, int(20 * GIB - others), 4 * GIB, int(others)))
    assert _vram_alerts(steps) == []


def test_vram_standing_still_has_no_trend_and_a_fall_after_it_is_seen() -> None:
    a = Analyzer(rate_tracker=FixedRates(decode=40.0))
    s = None
    for i in range(120):  # two minutes of unchanged free VRAM
        s = a.update(reading(float(i)), gpus(float(i), gpu(free=8 * GIB)))
    assert s is not None and s.forecast.seconds_until_vram_full is None
    grow = 50 * 2**20
    for i in range(120, 200):  # then something takes 50 MiB/s
        s = a.update(reading(float(i)), gpus(float(i), gpu(free=8 * GIB - grow * (i - 119))))
    assert s.forecast.seconds_until_vram_full is not None
    assert s.forecast.seconds_until_vram_full < (8 * GIB - grow * 80) / grow * 2
