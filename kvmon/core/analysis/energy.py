"""Energy: the power the model's devices draw, the energy they used while kvmon watched, and joules per generated
token, from the devices' own counters where they have them and their power readings otherwise.

A device counts when the model lives on it: a GPU holding the server's weights or cache, the CPU package when the
CPU decodes layers (host RAM is in the ceiling; its counter, RAPL, measures the whole package: every process on the
CPU, said so). Per
interval between polls each counted device adds the rise of its energy counter (a counter that wraps adds its
range; one that falls was reset, and that interval is not counted), or else its mean power over the interval. An
interval in which one counted device could not be read is left out whole, tokens included: joules per token is
energy over the decoding intervals divided by the tokens decoded in them, both over the same intervals. The figures
are of one state: when the model moves to other devices they are counted again from there, and while a device it
runs on cannot be read they are not known (never an earlier state's figure beside "not known").

Per reply: polls do not fall on a reply's start and end, but the server times the reply itself (its prefill and its
generation). A reply's energy is that time × the mean power its devices drew over the busy intervals since the last
reply ended (an estimate, said so): the intervals busy at both ends when there are any (the ones the reply began and
ended in hold idle time too), else every busy one; joules per token of the reply is that over its generated tokens.
With several replies at once each is charged the devices' whole power.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvmon.core.analysis.latency import Reply
from kvmon.core.analysis.notes import Notes
from kvmon.core.readings import GpuSetReading, HostReading
from kvmon.core.snapshot import EnergyView, GpuView, HostView

CPU_PACKAGE = "CPU package"
J_PER_WH = 3600.0
MAX_GAP_S = 30.0  # a longer gap between polls (a suspended machine, a stalled poll) is not integrated


@dataclass(frozen=True)
class DeviceEnergy:
    """One counted device at one poll: its energy counter (J), where it wraps, and its power (W)."""

    key: str
    name: str
    energy_j: float | None
    power_w: float | None
    range_j: float | None = None


def counted_devices(gpus: GpuSetReading | None, host: HostReading | None, gviews: tuple[GpuView, ...],
                    hview: HostView) -> tuple[list[DeviceEnergy] | None, Notes]:
    """The devices the model lives on, with their energy and power readings; None (with the reason ``energy``)
    when one of them reads neither, or the model's devices are not known."""
    holds = {g.index for g in gviews if (g.weights_bytes or 0) > 0 or (g.kv_allocated_bytes or 0) > 0
             or (g.server_used_bytes or 0) > 0}
    out: list[DeviceEnergy] = []
    for g in (gpus.gpus if gpus is not None else ()):
        if g.index not in holds:
            continue
        name = g.name or f"GPU {g.index}"
        if g.energy_j is None and g.power_w is None:
            why = g.reasons.get("energy_j") or g.reasons.get("power_w") or "the driver reports neither"
            return None, Notes(reasons={"energy": f"{name} reports no power or energy ({why})"})
        out.append(DeviceEnergy(f"gpu{g.index}:{g.uuid or g.pci_bus_id or name}", name, g.energy_j, g.power_w))
    if hview.in_ceiling:  # the CPU decodes layers of its own (not only the embedding lookup kept in host RAM)
        if host is None or host.cpu_energy_j is None:
            why = (host.reasons.get("cpu_energy_j") if host is not None else None) or "host not read"
            return None, Notes(reasons={"energy": "the model runs partly or wholly on the CPU, whose energy is not "
                                                  f"readable ({why})"})
        out.append(DeviceEnergy("cpu", CPU_PACKAGE, host.cpu_energy_j, None, host.cpu_energy_range_j))
    if not out:
        return None, Notes(reasons={"energy": "the devices the model runs on are not known" if not holds and not gviews
                                    else "no device the model runs on was read"})
    return out, Notes()


class EnergyMeter:
    """The session's energy over the polls: the last reading of each device, and the sums since the first."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, DeviceEnergy]] = {}  # key -> (t, reading)
        self._keys: tuple[str, ...] = ()
        self.energy_j = 0.0  # every counted interval
        self.decode_energy_j = 0.0  # the intervals that decoded
        self.decode_tokens = 0.0
        self.seconds = 0.0  # the time the counted intervals cover
        self._busy_j = 0.0  # the busy intervals since the last reply ended: their energy and time (its power)
        self._busy_s = 0.0
        self._full_j = 0.0  # of those, the ones busy at both ends (no idle time in them)
        self._full_s = 0.0
        self._was_busy = False  # the server was busy at the last poll
        self._reply: tuple[float, float | None, float] | None = None  # the last reply: (J, J/token, W)
        self._reply_why: str | None = None  # why the last reply's energy is not known

    def reset(self) -> None:
        self.__init__()  # type: ignore[misc]

    def _interval(self, t: float, d: DeviceEnergy) -> tuple[float | None, float | None]:
        """(joules since the device's last reading, its power now) for one device."""
        last = self._last.get(d.key)
        power = d.power_w
        if last is None:
            return None, power
        t0, prev = last
        dt = t - t0
        if not 0.0 < dt <= MAX_GAP_S:
            return None, power
        if d.energy_j is not None and prev.energy_j is not None:
            rise = d.energy_j - prev.energy_j
            if rise < 0:
                if d.range_j is None or d.range_j <= 0:
                    return None, power  # reset (a driver reload): this interval is unknown
                rise += d.range_j  # wrapped once
            return rise, power if power is not None else rise / dt
        if d.power_w is not None and prev.power_w is not None:
            return (d.power_w + prev.power_w) / 2.0 * dt, power
        return None, power

    def _reply_ended(self, reply: Reply) -> None:
        """The reply that ended in this interval: its own time × the power of the busy intervals it spanned."""
        j, s = (self._full_j, self._full_s) if self._full_s > 0 else (self._busy_j, self._busy_s)
        power = j / s if s > 0 else None
        self._busy_j = self._busy_s = self._full_j = self._full_s = 0.0
        if power is None or reply.generate_s is None or reply.generate_s <= 0:
            self._reply = None
            self._reply_why = ("the last reply's energy is not known: " + (
                "its devices' power over it was not read" if power is None else
                "several replies may have ended between two polls, so no one reply's time is known" if reply.several
                else "the server did not time it"))
            return
        self._reply_why = None
        joules = power * ((reply.ttft_s or 0.0) + reply.generate_s)
        tokens = reply.generated_tokens
        self._reply = (joules, joules / tokens if tokens else None, power)

    def update(self, t: float, devices: list[DeviceEnergy] | None, decode_tok_s: float | None, dt_s: float | None,
               *, busy: bool = False, reply: Reply | None = None) -> tuple[EnergyView | None, Notes]:
        """Add this poll's interval (``dt_s`` since the last poll; ``decode_tok_s`` over it while decoding; ``busy``:
        the server is processing a request at this poll; ``reply``: the reply that ended in the interval)."""
        was_busy, self._was_busy = self._was_busy, busy
        if devices is None:  # not known now: nothing of an earlier state is shown as if it were this one's
            self.reset()
            return None, Notes()
        keys = tuple(d.key for d in devices)
        if keys != self._keys:  # another set of devices (the model moved): its energy is counted from here on
            if self._keys:
                self.reset()
            self._keys = keys
        joules: list[float] = []
        power: float | None = 0.0
        for d in devices:
            j, p = self._interval(t, d)
            if j is not None:
                joules.append(j)
            power = None if p is None or power is None else power + p
            self._last[d.key] = (t, d)
        if len(joules) == len(devices) and dt_s is not None and dt_s > 0:
            used = sum(joules)
            self.energy_j += used
            self.seconds += dt_s
            if decode_tok_s is not None and decode_tok_s > 0:
                self.decode_energy_j += used
                self.decode_tokens += decode_tok_s * dt_s
            if busy or was_busy or reply is not None:
                self._busy_j += used
                self._busy_s += dt_s
            if busy and was_busy:
                self._full_j += used
                self._full_s += dt_s
        if reply is not None:
            self._reply_ended(reply)
        reasons: dict[str, str] = {}
        if self.seconds == 0.0:
            reasons["energy"] = "energy is counted from the second poll on (a counter needs two readings)"
        elif self.decode_tokens <= 0:
            reasons["energy.joules_per_token"] = "no token was decoded while the energy was counted"
        if self._reply_why:
            reasons["energy.last_reply"] = self._reply_why
        return self.view(power, tuple(d.name for d in devices)), Notes(reasons=reasons)

    def view(self, power_w: float | None, names: tuple[str, ...]) -> EnergyView:
        per_token = self.decode_energy_j / self.decode_tokens if self.decode_tokens > 0 else None
        reply_j, reply_per_token, reply_w = self._reply or (None, None, None)
        return EnergyView(power_w=power_w, energy_j=self.energy_j if self.seconds > 0 else None,
                          seconds=self.seconds, joules_per_token=per_token,
                          tokens_per_wh=J_PER_WH / per_token if per_token else None, devices=names,
                          whole_cpu_package=CPU_PACKAGE in names, last_reply_energy_j=reply_j,
                          last_reply_joules_per_token=reply_per_token, last_reply_power_w=reply_w)
