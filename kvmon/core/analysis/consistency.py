"""The checks of the analysis's inputs against each other: a value another contradicts is unknown, with the reason.

Every check runs inside ``Analyzer.update``, before the Snapshot exists, so nothing drawn, recorded or exported ever
shows a contradiction as a fact:

- **weights against the parameter count**: 0 bytes, or outside ``MIN/MAX_BYTES_PER_PARAM`` bytes per parameter of a
  known count (no file type holds fewer than ~1.1 bits or more than f32's 4 bytes plus its metadata), is no model's
  size. The first candidate (the server's or the file's figure, the log's buffers, bits per weight × parameters, the
  loaded size less the KV cache) that is not contradicted is used; each contradicted one says why.
- **a KV cache larger than where it lives**: the cache (with a hybrid's recurrent state) said to live on a device —
  by the log's buffers or by the layers there — larger than that device's memory (plus the system RAM it may map,
  AMD's GTT), or than host RAM for the part there, is unknown.
- **VRAM that nothing explains**: the server holds more on a GPU than its weights, KV cache and compute buffers
  there can be (the log's compute buffer, or ``COMPUTE_BOUND`` of the card when the log does not say, plus
  ``VRAM_SLACK_BYTES``): the rest is not shown as compute buffers; the server holds less than the weights and KV
  said to live there, or the parts with other programs exceed the card: the split is unknown.
- **a speed no device kvmon sees could give**: with no device read on the server's machine, the model would run on
  its CPU; a decode speed above what host RAM allows for the weights alone (``UNSEEN_MARGIN``) says it runs on a
  device kvmon cannot see (a GPU whose driver it cannot read, a server in a container): where it lives and its
  ceiling are then unknown, and nothing is built on the guess.
- **an efficiency above 100%**: measured speed above the ceiling means one of the ceiling's inputs is wrong; no
  percentage is shown, ``ceiling_suspect`` names the input most likely wrong, and the forecast (which stays under
  that ceiling) is not drawn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kvmon.core.analysis.notes import Notes
from kvmon.core.analysis.placement import OVER_TOLERANCE, Placement
from kvmon.core.readings import HostReading, Provenance
from kvmon.core.snapshot import CeilingSuspect, Forecast, GpuView, ModelView
from kvmon.core.units import GIB

MIN_BYTES_PER_PARAM = 0.1  # the smallest file types hold ~1.1 bits per weight (0.14 bytes)
MAX_BYTES_PER_PARAM = 4.5  # f32 is 4 bytes per weight; a file adds its metadata and tokenizer
VRAM_SLACK_BYTES = 1 * GIB  # the driver's context, allocator slack: what no buffer line names
COMPUTE_BOUND_FRACTION = 0.10  # compute buffers when the log does not give them: at most this share of the card
COMPUTE_BOUND_MIN_BYTES = 2 * GIB  # ... and at least this (a big vocabulary's logits at a large ubatch)
SLOW_DEVICE_SHARE = 0.25  # a host or PCIe device taking this much of the step time is the first suspect
UNSEEN_MARGIN = 1.25  # a speed this far above host RAM's bound for the weights alone is no CPU's


def _gb(n: float) -> str:
    return f"{n / GIB:.2f} GiB" if n >= GIB else f"{n / 2**20:.0f} MiB"


# -- weights ---------------------------------------------------------------------------------------------------


def weights_contradiction(weight_bytes: float, n_params: int | None) -> str | None:
    """Why ``weight_bytes`` cannot be the model's weights (None when nothing contradicts it)."""
    if weight_bytes <= 0:
        return f"{int(weight_bytes)} bytes of weights is no model"
    if n_params:
        per = weight_bytes / n_params
        if not MIN_BYTES_PER_PARAM <= per <= MAX_BYTES_PER_PARAM:
            return (f"{weight_bytes / 1e9:.2f} GB for {n_params / 1e9:.1f}B parameters is {per:.2g} bytes per "
                    f"parameter, outside what any file type holds ({MIN_BYTES_PER_PARAM}–{MAX_BYTES_PER_PARAM})")
    return None


@dataclass(frozen=True)
class WeightCandidate:
    """One way of knowing the weights: the bytes, where they came from, and how (for ``reasons``)."""

    weight_bytes: int
    provenance: Provenance
    how: str | None = None
    what: str = "the weights"  # names the candidate in a contradiction ("the server's figure", "the log's buffers")


def choose_weights(candidates: Sequence[WeightCandidate], n_params: int | None
                   ) -> tuple[WeightCandidate | None, list[str]]:
    """The first candidate nothing contradicts, and the contradictions of those passed over (in order)."""
    found: list[str] = []
    for c in candidates:
        why = weights_contradiction(c.weight_bytes, n_params)
        if why is None:
            return c, found
        found.append(f"{c.what} ({why})")
    return None, found


# -- the KV cache against the devices it lives on ---------------------------------------------------------------


def kv_contradiction(model: ModelView, kv_gpu: Mapping[int, float], kv_host: float,
                     gviews: Sequence[GpuView], host: HostReading | None) -> str | None:
    """Why the model's KV cache (with a hybrid's recurrent state beside it) cannot live where the placement puts it
    (``kv_gpu``: fractions per device index, ``kv_host``: the fraction in host RAM), or None."""
    if model.kv_allocated_bytes is None:
        return None
    # a model of recurrent layers only (Mamba, RWKV) holds no KV cells: 0 bytes is its cache, not a contradiction
    if model.kv_allocated_bytes <= 0 and model.n_ctx_total and (model.kv_bytes_per_token or 0) > 0:
        return f"a KV cache of 0 bytes holds no context ({model.n_ctx_total:,} tokens): the cache size is wrong"
    cache_bytes = model.kv_allocated_bytes + (model.recurrent_state_bytes or 0)
    by_index = {g.index: g for g in gviews}
    for idx, frac in sorted(kv_gpu.items()):
        g = by_index.get(idx)
        if g is None or not g.vram_total_bytes or frac <= 0:
            continue
        room = g.vram_total_bytes + (g.spill_total_bytes or 0)
        here = cache_bytes * frac
        if here > room * (1 + OVER_TOLERANCE):
            name = "unified memory" if g.kind == "unified_memory" else f"GPU {idx}"
            share = "" if frac >= 0.999 else f" ({_gb(here)} of it there)"
            return (f"a KV cache of {_gb(cache_bytes)}{share} is larger than {name} ({_gb(room)}): the cache size "
                    "or where it lives is wrong")
    ram = host.ram_total_bytes if host is not None else None
    if ram and kv_host > 0 and cache_bytes * kv_host > ram * (1 + OVER_TOLERANCE):
        return (f"a KV cache of {_gb(cache_bytes * kv_host)} in host RAM is larger than the RAM ({_gb(ram)}): the "
                "cache size or where it lives is wrong")
    return None


def without_kv(model: ModelView, why: str) -> tuple[ModelView, Notes]:
    """The model with its KV allocation (and the recurrent state beside it) unknown, for ``why``."""
    notes = Notes(reasons={"kv_allocated_bytes": why}, withdrawn=frozenset({"kv_allocated_bytes",
                                                                             "recurrent_state_bytes"}))
    return replace(model, kv_allocated_bytes=None, recurrent_state_bytes=None), notes


# -- VRAM against its parts --------------------------------------------------------------------------------------


def vram_split(gviews: Sequence[GpuView], compute_by_index: Mapping[int, int]) -> tuple[tuple[GpuView, ...], Notes]:
    """Each GPU's split with the parts its measured memory contradicts made unknown (see the module doc)."""
    out: list[GpuView] = []
    reasons: dict[str, str] = {}
    for g in gviews:
        why, unknown = _split_contradiction(g, compute_by_index.get(g.index))
        if why is not None:
            greasons = {**g.reasons, "vram_split": why}
            changes: dict[str, Any] = {"server_other_bytes": None, "reasons": greasons}
            if unknown == "all":
                changes.update(weights_bytes=None, kv_allocated_bytes=None, kv_in_use_bytes=None, draft_bytes=None)
            g = replace(g, **changes)
            reasons[f"gpu{g.index}.vram"] = f"GPU {g.index}: {why}"
        out.append(g)
    return tuple(out), Notes(reasons=reasons)


def _split_contradiction(g: GpuView, compute: int | None) -> tuple[str | None, str]:
    """(why, "other" | "all"): what of the GPU's split its measured memory contradicts."""
    w, kv = g.weights_bytes, g.kv_allocated_bytes
    if w is None and kv is None:
        return None, ""
    parts = (w or 0) + (kv or 0) + (g.draft_bytes or 0)  # a draft model's weights and KV live beside them
    held = g.server_used_bytes
    if held is not None and parts > held * (1 + OVER_TOLERANCE) + 64 * 2**20:
        return (f"the server holds {_gb(held)} here (measured), less than the {_gb(parts)} of weights and KV cache "
                "said to live here: how the model splits over this GPU is unknown"), "all"
    total = g.vram_total_bytes
    if total and parts + (g.other_processes_bytes or 0) > (total + (g.spill_total_bytes or 0)) * (1 + OVER_TOLERANCE):
        return (f"weights and KV cache said to live here ({_gb(parts)}) and other programs "
                f"({_gb(g.other_processes_bytes or 0)}) exceed the GPU's {_gb(total)}: how the model splits over "
                "this GPU is unknown"), "all"
    other = g.server_other_bytes
    if other is None or held is None or total is None:
        return None, ""
    bound = compute if compute is not None else max(COMPUTE_BOUND_MIN_BYTES, COMPUTE_BOUND_FRACTION * total)
    if other > bound + VRAM_SLACK_BYTES:
        given = f"compute buffers ({_gb(compute)})" if compute is not None else "compute buffers"
        return (f"{_gb(other)} of the {_gb(held)} the server holds here is explained by neither its weights "
                f"({_gb(w or 0)}), KV cache ({_gb(kv or 0)}), {given} nor other programs: not shown as compute "
                "buffers (the weights or KV cache here are likely understated)"), "other"
    return None, ""


# -- a device kvmon cannot see ---------------------------------------------------------------------------------


def unseen_device(decode: float | None, host_bandwidth_bytes_per_s: float | None,
                  weight_bytes_read_per_token: float | None) -> str | None:
    """Why the model cannot be on this machine's CPU (None when the speed allows it, or is not known)."""
    if not decode or not host_bandwidth_bytes_per_s or not weight_bytes_read_per_token:
        return None
    bound = host_bandwidth_bytes_per_s / weight_bytes_read_per_token
    if decode <= bound * UNSEEN_MARGIN:
        return None
    return (f"decoding at {decode:.1f} tok/s, where host RAM ({host_bandwidth_bytes_per_s / 1e9:.0f} GB/s) allows at "
            f"most {bound:.1f} tok/s for the weights alone: the model runs on a device kvmon cannot see (a GPU whose "
            "driver it cannot read, or a server in a container or on another machine), so where it lives and its "
            "ceiling are unknown")


# -- the efficiency ----------------------------------------------------------------------------------------------


def efficiency(decode: float | None, ceiling_now: float | None, devices: Sequence[Any] | None, place: Placement,
               gviews: Sequence[GpuView], model: ModelView, model_provenance: Mapping[str, str]
               ) -> tuple[float | None, CeilingSuspect | None, Notes]:
    """(decode ÷ ceiling, None), or (None, which input is suspect) when the measured speed is above the ceiling;
    ``model_provenance``: where the model view's figures came from."""
    if decode is None or not ceiling_now:
        return None, None, Notes()
    eff = decode / ceiling_now
    if eff > 1.0:
        suspect = ceiling_suspect(decode, ceiling_now, devices, place, gviews, model, model_provenance)
        return None, suspect, Notes(reasons={"efficiency": suspect.message})
    return eff, None, Notes({"efficiency": Provenance.COMPUTED})


def forecast_under(fc: Forecast, suspect: CeilingSuspect | None) -> tuple[Forecast, Notes]:
    """The forecast, without its milestones and curve when the ceiling they stay under is suspect: a speed bounded
    by a ceiling the measured one already exceeds would contradict what is measured now."""
    if suspect is None or not (fc.milestones or fc.curve):
        return fc, Notes()
    why = ("unknown: the forecast stays under the ceiling, and the measured speed exceeds that ceiling (one of its "
           "inputs is wrong, see the efficiency)")
    return replace(fc, milestones=(), curve=()), Notes(reasons={"forecast.milestones": why})


def ceiling_suspect(decode: float, ceiling_now: float, devices: Sequence[Any] | None, place: Placement | None,
                    gviews: Sequence[GpuView], model: ModelView, prov: Mapping[str, str]) -> CeilingSuspect:
    """Measured ``decode`` above ``ceiling_now``: the ceiling input most likely wrong, the least sure one first.

    A host or PCIe device that takes a large share of the step time (its bandwidth, or what it is taken to read);
    a guessed split over GPUs; an estimated MoE weight read; a GPU bandwidth from the table or the user; an
    incomplete model shape; else the bandwidth (the hardware reaches more than the figure used).
    """
    head = (f"measured {decode:.1f} tok/s exceeds the computed ceiling of {ceiling_now:.1f} tok/s, so the ceiling is "
            "uncertain: ")
    devs = list(devices or ())
    step = sum((d.weight_bytes + d.kv_fraction) / d.bandwidth_bytes_per_s for d in devs
               if d.bandwidth_bytes_per_s) or 0.0
    for d in devs:
        if d.location in ("host", "pcie") and d.bandwidth_bytes_per_s and step > 0:
            share = (d.weight_bytes + d.kv_fraction) / d.bandwidth_bytes_per_s / step
            if share >= SLOW_DEVICE_SHARE and d.weight_bytes > 0:
                return CeilingSuspect("placement", head + (
                    f"{d.name} is taken to read {d.weight_bytes / 1e9:.2f} GB of weights per token at "
                    f"{d.bandwidth_bytes_per_s / 1e9:.0f} GB/s; its buffer may hold tensors read only in part (the "
                    "token embeddings), or its bandwidth is higher than set"))
            if share >= SLOW_DEVICE_SHARE:
                return CeilingSuspect("bandwidth", head + (
                    f"the KV cache on {d.name} is read at {d.bandwidth_bytes_per_s / 1e9:.0f} GB/s; that bandwidth "
                    "is likely higher (set it in settings)"))
    if place is not None and place.source in ("even", "process"):
        return CeilingSuspect("placement", head + (
            f"the split of the model over GPUs is a guess ({place.note or place.source}); the server's "
            "log (--log) gives the real one"))
    if prov.get("weight_bytes_read_per_token") == "estimated" or prov.get("weight_bytes") == "estimated":
        return CeilingSuspect("weights_read_per_token", head + (
            "the weights read per token are an estimate (MoE routing, no shape, or the model's size estimated): "
            "fewer bytes are read than assumed"))
    guessed = [g for g in gviews if g.bandwidth_source in ("table", "user")]
    if guessed:
        g = guessed[0]
        where = "the GPU table" if g.bandwidth_source == "table" else "your settings"
        return CeilingSuspect("bandwidth", head + (
            f"GPU {g.index}'s peak bandwidth comes from {where} ({(g.peak_bandwidth_bytes_per_s or 0) / 1e9:.0f} "
            "GB/s); this card's may be higher"))
    if model.shape is not None and model.shape.partial:
        return CeilingSuspect("kv_in_use", head + (
            f"the model's shape is incomplete ({model.shape_note or 'partial metadata'}): the KV bytes read per token "
            "may be fewer"))
    return CeilingSuspect("bandwidth", head + "the peak bandwidth used is below what this hardware reaches")
