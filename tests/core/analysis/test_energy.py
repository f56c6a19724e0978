"""Energy of the model's devices: counters, wraps, resets and power readings summed per interval, joules per token
over the same intervals, which devices count, and the sources that read power and energy without root."""

from __future__ import annotations

import pytest

from kvmon.core.analysis.energy import CPU_PACKAGE, DeviceEnergy, EnergyMeter, counted_devices
from kvmon.core.readings import GpuReading, GpuSetReading, HostReading
from kvmon.core.snapshot import GpuView, HostView

GPU = "NVIDIA GeForce RTX 4090"


def _gpu(energy_j: float | None, power_w: float | None) -> DeviceEnergy:
    return DeviceEnergy("gpu0:x", GPU, energy_j, power_w)


def test_a_counter_gives_the_energy_and_joules_per_token_over_the_decoding_intervals() -> None:
    m = EnergyMeter()
    first, notes = m.update(0.0, [_gpu(1000.0, 300.0)], None, None)
    assert first is not None and first.energy_j is None  # one reading: no interval
    assert "second poll" in notes.reasons["energy"]
    v, _ = m.update(1.0, [_gpu(1300.0, 300.0)], 100.0, 1.0)  # 300 J while decoding 100 tokens
    v, _ = m.update(2.0, [_gpu(1350.0, 50.0)], None, 1.0)  # 50 J idle: energy, but no tokens
    assert v.energy_j == pytest.approx(350.0) and v.seconds == pytest.approx(2.0)
    assert v.joules_per_token == pytest.approx(3.0)
    assert v.tokens_per_wh == pytest.approx(1200.0)
    assert v.power_w == pytest.approx(50.0) and v.devices == (GPU,)


def test_power_alone_is_integrated_between_polls() -> None:
    m = EnergyMeter()
    m.update(0.0, [_gpu(None, 100.0)], None, None)
    v, _ = m.update(2.0, [_gpu(None, 300.0)], 50.0, 2.0)
    assert v.energy_j == pytest.approx(400.0)  # the mean of 100 and 300 W over 2 s
    assert v.joules_per_token == pytest.approx(4.0)


def test_a_wrapped_counter_adds_its_range_and_a_reset_one_is_not_counted() -> None:
    m = EnergyMeter()
    cpu = "cpu"
    m.update(0.0, [DeviceEnergy(cpu, CPU_PACKAGE, 262_000.0, None, 262_143.0)], None, None)
    v, _ = m.update(1.0, [DeviceEnergy(cpu, CPU_PACKAGE, 57.0, None, 262_143.0)], 10.0, 1.0)
    assert v.energy_j == pytest.approx(200.0) and v.power_w == pytest.approx(200.0)  # 143 J to the wrap + 57 J
    v, _ = m.update(2.0, [DeviceEnergy(cpu, CPU_PACKAGE, 5.0, None, None)], 10.0, 1.0)  # fell, no range: reset
    assert v.energy_j == pytest.approx(200.0) and v.seconds == pytest.approx(1.0)
    assert v.whole_cpu_package


def test_an_interval_with_one_device_unread_is_left_out_whole_tokens_included() -> None:
    m = EnergyMeter()
    a, b = DeviceEnergy("a", "A", 0.0, None), DeviceEnergy("b", "B", 0.0, None)
    m.update(0.0, [a, b], None, None)
    m.update(1.0, [DeviceEnergy("a", "A", 100.0, None), DeviceEnergy("b", "B", 100.0, None)], 100.0, 1.0)
    v, _ = m.update(2.0, [DeviceEnergy("a", "A", 200.0, None), DeviceEnergy("b", "B", None, None)], 100.0, 1.0)
    assert v.energy_j == pytest.approx(200.0) and v.joules_per_token == pytest.approx(2.0)
    assert v.power_w is None  # B's power is not known now


def test_a_long_gap_is_not_integrated() -> None:
    m = EnergyMeter()
    m.update(0.0, [_gpu(None, 300.0)], None, None)
    v, _ = m.update(600.0, [_gpu(None, 300.0)], 10.0, 600.0)  # the machine slept: not 180 kJ
    assert v.energy_j is None


def _views(*, holds: bool, in_ceiling: bool) -> tuple[tuple[GpuView, ...], HostView]:
    return (GpuView(index=0, name=GPU, weights_bytes=4 << 30 if holds else 0),), HostView(in_ceiling=in_ceiling)


def test_the_devices_the_model_runs_on_are_counted() -> None:
    gpus = GpuSetReading(t_monotonic=0.0, gpus=(GpuReading(index=0, name=GPU, power_w=250.0, energy_j=9.0e5),))
    host = HostReading(t_monotonic=0.0, cpu_energy_j=5000.0, cpu_energy_range_j=262_143.0)
    gv, hv = _views(holds=True, in_ceiling=False)
    (d,) = counted_devices(gpus, host, gv, hv)[0]
    assert (d.name, d.energy_j, d.power_w) == (GPU, 9.0e5, 250.0)
    gv, hv = _views(holds=True, in_ceiling=True)  # partial offload: the CPU decodes layers too
    assert [d.name for d in counted_devices(gpus, host, gv, hv)[0]] == [GPU, CPU_PACKAGE]
    gv, hv = _views(holds=False, in_ceiling=True)  # CPU only: an idle GPU beside it is not the model's
    assert [d.name for d in counted_devices(gpus, host, gv, hv)[0]] == [CPU_PACKAGE]


def test_a_device_with_no_reading_makes_the_energy_unknown_with_its_reason() -> None:
    gpus = GpuSetReading(t_monotonic=0.0, gpus=(GpuReading(index=0, name=GPU, reasons={"energy_j": "not supported"}),))
    gv, hv = _views(holds=True, in_ceiling=False)
    devices, notes = counted_devices(gpus, None, gv, hv)
    assert devices is None and notes.reasons["energy"] == f"{GPU} reports no power or energy (not supported)"
    host = HostReading(t_monotonic=0.0, reasons={"cpu_energy_j": "root only"})
    gv, hv = _views(holds=False, in_ceiling=True)
    devices, notes = counted_devices(None, host, gv, hv)
    assert devices is None and "root only" in notes.reasons["energy"]


# ---- the sources -------------------------------------------------------------------------------------


# ---- end to end: the demo's two RTX 3090s ------------------------------------------------------------

@pytest.fixture(scope="module")
def decoding_3090s() -> list[tuple[float, dict[str, object]]]:
    from stories import Watch
    from story_window import watch_in_once_json

    return watch_in_once_json("seed-3090x2", Watch(0.0, 120.0, step_s=4.0))  # turns: prefill, decode, reading


def test_the_demo_says_its_energy_per_token_in_once_json(decoding_3090s) -> None:  # type: ignore[no-untyped-def]
    """Two RTX 3090s decoding: the simulated cards draw what a real one does (a published NVML energy-counter
    measurement of llama.cpp-class decode on an RTX 3090 at its stock limit: 284 W), and in steady decode the
    session's joules per token is the power over the speed."""
    docs = [d for _t, d in decoding_3090s]
    _t, doc = decoding_3090s[-1]
    e = doc["energy"]
    assert isinstance(e, dict) and e["devices"] == ["NVIDIA GeForce RTX 3090"] * 2 and not e["whole_cpu_package"]
    busy = max(d["power_w"] for d in docs)  # type: ignore[type-var]
    assert busy / 2 == pytest.approx(284.0, rel=0.15)  # type: ignore[operator]
    decoding = [d for d in docs if d["decode_tok_s"]]
    assert len(decoding) >= 3
    per_token = [d["power_w"] / d["decode_tok_s"] for d in decoding]  # type: ignore[operator]
    assert min(per_token) * 0.99 <= doc["joules_per_token"] <= max(per_token) * 1.01  # type: ignore[operator]
    assert doc["tokens_per_wh"] == pytest.approx(3600.0 / doc["joules_per_token"])  # type: ignore[operator]
    idle = min(d["power_w"] for d in docs)  # type: ignore[type-var]
    assert idle * e["seconds"] < e["energy_j"] < busy * e["seconds"]  # type: ignore[operator]


def test_energy_in_the_exporter_the_csv_and_a_recording(decoding_3090s) -> None:  # type: ignore[no-untyped-def]
    from story_window import demo_snapshots

    from kvmon.core.recorder import snapshot_from_dict, snapshot_to_dict
    from kvmon.core.recording_csv import to_csv_text
    from kvmon.core.report_prometheus import snapshot_families

    snaps = demo_snapshots("seed-3090x2", 60.0, 10.0, 2.0)
    last = snaps[-1]
    assert last.energy is not None and last.energy.joules_per_token
    families = {m.name: m for m in snapshot_families(last)}
    for name, value in (("kvmon_power_watts", last.energy.power_w), ("kvmon_energy_joules", last.energy.energy_j),
                        ("kvmon_energy_joules_per_token", last.energy.joules_per_token),
                        ("kvmon_tokens_per_watt_hour", last.energy.tokens_per_wh)):
        assert families[name].samples[0].value == pytest.approx(value)
    header = to_csv_text(snaps).splitlines()[0]
    assert {"power_w", "energy_j", "joules_per_token"} <= set(header.split(","))
    assert snapshot_from_dict(snapshot_to_dict(last)).energy == last.energy




def test_the_cpu_counter_is_read_every_poll_while_the_rest_of_the_host_is_kept() -> None:
    """Host RAM is read every few seconds; the CPU's energy counter each poll (an interval needs its own two ends)."""
    from kvmon.app.monitor import DevicePoller

    class Host:
        def __init__(self) -> None:
            self.polls, self.energy_j = 0, 100.0

        def poll(self, _pids: object) -> HostReading:
            self.polls += 1
            return HostReading(t_monotonic=0.0, ram_total_bytes=1 << 30, cpu_energy_j=self.energy_j)

        def cpu_energy(self) -> tuple[float | None, float | None, str | None]:
            return self.energy_j, 262_143.0, None

    host, now = Host(), [0.0]
    dp = DevicePoller(None, host, clock=lambda: now[0], host_interval_s=5.0)  # type: ignore[arg-type]
    seen = []
    for _ in range(3):
        r = dp.poll_host((1,))
        assert r is not None
        seen.append((r.cpu_energy_j, r.ram_total_bytes))
        host.energy_j += 50.0
        now[0] += 1.0
    assert host.polls == 1 and seen == [(100.0, 1 << 30), (150.0, 1 << 30), (200.0, 1 << 30)]


def test_a_replys_energy_is_its_own_time_at_the_power_of_the_busy_intervals_it_spanned() -> None:
    """Idle at 50 W, then busy at 300 W for three polls, then the reply ends: the server timed it at 0.5 s of prefill
    and 2 s of generation for 100 tokens, so it used 300 W × 2.5 s = 750 J, 7.5 J per token; the idle interval's
    power is not its."""
    from kvmon.core.analysis.latency import Reply

    m = EnergyMeter()
    m.update(0.0, [_gpu(0.0, 50.0)], None, None)
    m.update(1.0, [_gpu(50.0, 50.0)], None, 1.0)  # idle
    v = None
    for i, t in enumerate((2.0, 3.0, 4.0)):
        reply = Reply(ttft_s=0.5, generated_tokens=100, generate_s=2.0, itl_s=0.02) if i == 2 else None
        v, _ = m.update(t, [_gpu(50.0 + 300.0 * (t - 1.0), 300.0)], 50.0, 1.0, busy=True, reply=reply)
    assert v is not None and v.last_reply_power_w == pytest.approx(300.0)
    assert v.last_reply_energy_j == pytest.approx(750.0) and v.last_reply_joules_per_token == pytest.approx(7.5)
    # the next reply: no busy interval read in between (its devices unread): not known, and said why
    m.update(5.0, [_gpu(None, None)], 50.0, 1.0, busy=True)
    v, notes = m.update(6.0, [_gpu(None, None)], None, 1.0, reply=Reply(generate_s=1.0, generated_tokens=10))
    assert v is not None and v.last_reply_energy_j is None and v.last_reply_joules_per_token is None
    assert "power over it was not read" in notes.reasons["energy.last_reply"]
    m.update(7.0, [_gpu(1000.0, 300.0)], 50.0, 1.0, busy=True)
    m.update(8.0, [_gpu(1300.0, 300.0)], 50.0, 1.0, busy=True)
    v, notes = m.update(9.0, [_gpu(1600.0, 300.0)], 50.0, 1.0, reply=Reply(ttft_s=0.1, itl_s=0.02))  # vLLM's means
    assert v is not None and v.last_reply_energy_j is None and "did not time it" in notes.reasons["energy.last_reply"]


def test_the_demo_says_each_replys_energy(decoding_3090s) -> None:  # type: ignore[no-untyped-def]
    """The demo's replies: each one's energy is its prefill and generation time at the power of its cards, and its
    joules per token that over its tokens, near the power over the speed while it decoded."""
    seen = [d for _t, d in decoding_3090s if d["last_reply_energy_j"] is not None]
    assert seen
    for doc in seen:
        e, lat = doc["energy"], doc["latency"]
        assert isinstance(e, dict) and isinstance(lat, dict)
        seconds = (lat["ttft_last_s"] or 0.0) + lat["last_generate_s"]
        assert e["last_reply_energy_j"] == pytest.approx(e["last_reply_power_w"] * seconds)
        tokens = lat["last_generate_s"] / lat["itl_last_s"]
        assert doc["last_reply_joules_per_token"] == pytest.approx(doc["last_reply_energy_j"] / tokens, rel=1e-6)
        assert e["last_reply_tokens_per_wh"] == pytest.approx(3600.0 / doc["last_reply_joules_per_token"])
        # two 3090s at ~284 W each while decoding: the reply's power is theirs
        assert e["last_reply_power_w"] == pytest.approx(2 * 284.0, rel=0.2)


def test_the_last_replys_energy_in_the_exporter_the_csv_and_a_recording() -> None:
    from story_window import demo_snapshots

    from kvmon.core.recorder import snapshot_from_dict, snapshot_to_dict
    from kvmon.core.recording_csv import to_csv_text
    from kvmon.core.report_prometheus import snapshot_families

    snaps = demo_snapshots("seed-3090x2", 40.0, 40.0, 4.0)
    last = snaps[-1]
    assert last.energy is not None and last.energy.last_reply_energy_j and last.energy.last_reply_joules_per_token
    families = {m.name: m for m in snapshot_families(last)}
    assert families["kvmon_last_reply_energy_joules"].samples[0].value == pytest.approx(last.energy.last_reply_energy_j)
    assert families["kvmon_last_reply_energy_joules_per_token"].samples[0].value == pytest.approx(
        last.energy.last_reply_joules_per_token)
    header, *rows = to_csv_text(snaps).splitlines()
    col = header.split(",").index("last_reply_joules_per_token")
    assert float(rows[-1].split(",")[col]) == pytest.approx(last.energy.last_reply_joules_per_token)
    assert snapshot_from_dict(snapshot_to_dict(last)).energy == last.energy


def test_before_any_token_is_counted_the_energy_line_says_so_in_words() -> None:
    """Power known, no decoding interval counted yet: one phrase where the per-token figures go, not "— · —
    tokens/Wh", and not "no tokens decoded" (replies shorter than a poll decode between two counts)."""
    from kvmon.core.snapshot import Connection, ConnectionStatus, EnergyView, Snapshot
    from kvmon.gui.panels.energy import energy_text

    s = Snapshot(seq=1, t_monotonic=0.0, t_wall=1.8e9, connection=Connection(ConnectionStatus.CONNECTED),
                 energy=EnergyView(power_w=25.0, energy_j=36.0, seconds=2.0, devices=("NVIDIA GeForce RTX 4090",)))
    line, _tip = energy_text(s)
    assert line == "25.0 W now · J/token not measured yet · 0.01 Wh this session", line
