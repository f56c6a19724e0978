"""Energy: what the model's devices draw now, joules per generated token (this session's and the last reply's) and
tokens per watt-hour, and the energy used while kvmon watched; or why it is not known."""

from __future__ import annotations

from kvmon.core.snapshot import Snapshot
from kvmon.core.units import DASH, fmt_count, fmt_devices, fmt_duration, fmt_energy, fmt_joules_per_token, fmt_watts
from kvmon.gui.text import CaptionedLine


def _sig(j: float | None) -> str:
    """A joules-per-token figure without its unit (the line's J/token beside it says it)."""
    return fmt_joules_per_token(j).removesuffix(" J/token")


def energy_text(s: Snapshot) -> tuple[str, str]:
    """(line, tooltip) for one snapshot."""
    e = s.energy
    if e is None:
        why = s.reasons.get("energy") or "no device the model runs on reports its power"
        return (f"not known: {why}", "kvmon reads power without root: NVML, amdgpu/xe/i915 hwmon, the CPU's RAPL "
                "counter. " + why)
    per_wh = f"{fmt_count(round(e.tokens_per_wh))} tokens/Wh" if e.tokens_per_wh else f"{DASH} tokens/Wh"
    # tokens per Wh is 3600 ÷ J/token: on the line while there is room, in the tooltip once the last reply's is shown
    last = f" (last reply {_sig(e.last_reply_joules_per_token)})" if e.last_reply_joules_per_token else ""
    if e.joules_per_token is None:  # one phrase, not a row of dashes; it never says nothing was decoded, since
        # replies shorter than a poll (the server timed them) may have decoded while no interval was counted
        per_token = "J/token not measured yet · "
    else:
        per_token = f"{fmt_joules_per_token(e.joules_per_token)}{last} · " + ("" if last else f"{per_wh} · ")
    line = f"{fmt_watts(e.power_w)} now · {per_token}{fmt_energy(e.energy_j)} this session"
    whole = ("\nThe CPU package's counter includes every process on the CPU, not only the model server."
             if e.whole_cpu_package else "")
    unknown_why = s.reasons.get("energy.joules_per_token") or s.reasons.get("energy")
    if e.last_reply_energy_j is not None:
        reply = (f"\nLast reply: {fmt_energy(e.last_reply_energy_j)} ({e.last_reply_energy_j:,.0f} J) at "
                 f"{fmt_watts(e.last_reply_power_w)}: {fmt_joules_per_token(e.last_reply_joules_per_token)}"
                 + (f", {fmt_count(round(3600 / e.last_reply_joules_per_token))} tokens/Wh"
                    if e.last_reply_joules_per_token else "")
                 + " — its own time (its prompt's prefill and its generation, as the server timed them) × the power "
                   "its devices drew meanwhile, over its generated tokens (an estimate; with several replies at once "
                   "each is charged the whole power). A long prompt makes it more than the session's figure, which "
                   "counts the decoding intervals.")
        if s.latency is not None and s.latency.ttft_lower_bound:
            reply += " Its prefill time is a lower bound here (the server's counter leaves out the draft's)."
    else:
        reply = f"\n{s.reasons['energy.last_reply']}" if "energy.last_reply" in s.reasons else ""
    tip = (f"Counted: {fmt_devices(e.devices)}, over {fmt_duration(e.seconds)}.\nJoules per token: the energy of the "
           "intervals that decoded, over the tokens decoded in them (prefill of those intervals included): "
           f"{per_wh} this session.{reply}{whole}" + (f"\n{unknown_why}" if unknown_why else ""))
    return line, tip


class EnergyPanel(CaptionedLine):
    """One line: power now · J/token · tokens/Wh · energy this session (set again only when it reads differently)."""

    CAPTION = "Energy:"

    def text(self, s: Snapshot) -> tuple[str, str]:  # type: ignore[override]
        return energy_text(s)
