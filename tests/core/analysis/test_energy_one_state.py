"""Energy is known for one state or not known, never both: an earlier state's joules per token is not shown beside
"not known", nor carried over to other devices."""

from __future__ import annotations

from kvmon.core.analysis.energy import DeviceEnergy, EnergyMeter


def test_a_device_not_read_leaves_nothing_of_the_state_before() -> None:
    meter = EnergyMeter()
    gpu = [DeviceEnergy("gpu0", "RTX 4090", None, 300.0)]
    for t in range(0, 10):
        view, _ = meter.update(float(t), gpu, 70.0, 1.0 if t else None)
    assert view is not None and view.joules_per_token is not None and view.joules_per_token > 4.0
    # the model spilled onto the CPU, whose energy is not readable: not known, and no figure of before beside it
    assert meter.update(10.0, None, 7.0, 1.0)[0] is None
    # on the GPU and the CPU package now: counted from here on, one state's figure
    both = [DeviceEnergy("gpu0", "RTX 4090", None, 300.0), DeviceEnergy("cpu", "CPU package", 0.0, None)]
    first, _ = meter.update(11.0, both, 7.0, 1.0)
    assert first is not None and first.joules_per_token is None and first.seconds == 0.0
    later, _ = meter.update(12.0, [both[0], DeviceEnergy("cpu", "CPU package", 90.0, None)], 7.0, 1.0)
    assert later is not None and later.joules_per_token == (300.0 + 90.0) / 7.0
    assert later.devices == ("RTX 4090", "CPU package") and later.whole_cpu_package
