"""Speculative decoding from the server's own counters, and the ceiling it lifts.

llama-server counts drafts, drafted tokens and accepted tokens (``spec_decode_*_total`` on ``/metrics``, moved
when a reply ends) beside the tokens it generated (``tokens_predicted_total``); vLLM the same under the same names
beside ``generation_tokens_total`` (each backend names its counter of generated tokens). Each target step reads the
weights and the KV cache once and yields its own token plus the drafted ones it accepts, so the memory bus allows
tokens-per-step times the one-token ceiling, less the time the drafter takes: each drafted token reads the draft
model's weights (or the model's MTP layers) and the draft context's KV cache at this depth
(``kvmon.core.analysis.draft``). Without a drafter kvmon can size (n-gram lookup, a draft file it cannot read) the
lifted ceiling is an upper bound, and it says so.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

from kvmon.core.analysis.draft import DraftContext
from kvmon.core.analysis.notes import Notes
from kvmon.core.backend import backend_of
from kvmon.core.readings import ACCEPTED_PER_POSITION, Provenance, ServerReading, position_counts
from kvmon.core.snapshot import Forecast, SpeculativeView
from kvmon.core.units import fmt_bytes
from kvmon.physics.ceiling import speculative_ceiling, speculative_tokens_per_step

DRAFTS = "spec_decode_num_drafts_total"
DRAFT_TOKENS = "spec_decode_num_draft_tokens_total"
ACCEPTED = "spec_decode_num_accepted_tokens_total"


def speculation(r: ServerReading) -> tuple[SpeculativeView | None, Notes]:
    """The server's speculation counts since it started, or None when it has drafted nothing (or says nothing)."""
    m = r.metrics
    generated = m.get(backend_of(r.backend).generated_tokens_counter, 0.0)
    drafts = m.get(DRAFTS)
    if not drafts:
        if any(sl.speculative for sl in r.slots):  # it speculates, and no reply has ended to count it yet
            why = ("the server speculates (its slots say so); it counts acceptance when a reply ends"
                   + ("" if r.metrics_enabled else " on /metrics (start it with --metrics)"))
            return SpeculativeView(drafts=0, draft_tokens=0, accepted_tokens=0,
                                   generated_tokens=int(generated)), Notes(reasons={"speculative": why})
        return None, Notes()
    draft_tokens, accepted = m.get(DRAFT_TOKENS, 0.0), m.get(ACCEPTED, 0.0)
    per_step = speculative_tokens_per_step(generated, accepted)
    odd = {} if per_step is not None else {"speculative": f"the server's counts do not add up ({accepted:.0f} "
                                                          f"tokens accepted of {generated:.0f} generated): tokens "
                                                          "per step unknown"}
    counts, rates, by_pos = by_position(position_counts(m, ACCEPTED_PER_POSITION), drafts, accepted)
    return SpeculativeView(drafts=int(drafts), draft_tokens=int(draft_tokens), accepted_tokens=int(accepted),
                           generated_tokens=int(generated), tokens_per_step=per_step,
                           acceptance_rate=accepted / draft_tokens if draft_tokens > 0 else None,
                           accepted_by_position=counts, acceptance_by_position=rates), Notes(reasons=odd).then(by_pos)


def by_position(counts: tuple[float, ...], drafts: float, accepted: float
                ) -> tuple[tuple[int, ...], tuple[float, ...], Notes]:
    """Accepted drafted tokens at each draft position and their share of the drafts: the acceptance rate at each
    position (the first drafted token of a draft is accepted in that share of drafts, the second in that, …). A
    token at a position is accepted only after every one before it, so the counts fall with position and add up to
    the accepted tokens; counts that do not are not shown, and say why."""
    if not counts:
        return (), (), Notes()
    total = sum(counts)
    falling = all(a >= b for a, b in pairwise(counts))
    if abs(total - accepted) > 0.5 or not falling or counts[0] > drafts:
        why = (f"the server's counts by draft position ({', '.join(f'{c:.0f}' for c in counts)}) do not add up to "
               f"its {accepted:.0f} accepted tokens in {drafts:.0f} drafts: acceptance by position not shown")
        return (), (), Notes(reasons={"speculative.by_position": why})
    return tuple(int(c) for c in counts), tuple(c / drafts for c in counts), Notes()


def lifted(spec: SpeculativeView | None, ceiling_now: float | None, curve: tuple[tuple[int, float], ...], *,
           draft: DraftContext | None = None, context_tokens: int | None = None, target_bytes_now: float | None = None,
           ) -> tuple[SpeculativeView | None, float | None, tuple[tuple[int, float], ...], Notes]:
    """The ceiling and its curve with speculation's tokens per step (the one-token ceiling kept in ``spec``); while
    the tokens per step are not known the ceiling is not either (the one-token one is only its floor). With the
    drafter (``draft``: a draft model, or the model's MTP layers) and the target's bytes per token at this depth,
    each drafted token's read of the drafter's weights and of its KV cache at each depth is in the step's time;
    without them the lifted ceiling is an upper bound."""
    if spec is None:
        return spec, ceiling_now, curve, Notes()
    spec = replace(spec, one_token_ceiling_tok_s=ceiling_now, one_token_curve=curve)
    k = spec.tokens_per_step
    if k is None:
        if ceiling_now is None:
            return spec, None, (), Notes()
        why = (f"the server speculates and its tokens per step are not counted yet: the ceiling is above the "
               f"one-token {ceiling_now:.1f} tok/s by a factor not known")
        return spec, None, (), Notes(reasons={"ceiling_tok_s": why}, withdrawn=frozenset({"ceiling_tok_s"}))
    steps = spec.generated_tokens - spec.accepted_tokens
    drafted = spec.draft_tokens / steps if steps > 0 else None
    depth = context_tokens or 0
    read_now = draft.read_bytes(depth) if draft is not None else None
    spec = replace(spec, drafted_per_step=drafted,
                   draft_weight_bytes=draft.read_weight_bytes if draft is not None else None,
                   draft_bytes_per_token=read_now)
    if ceiling_now is None:
        return spec, None, tuple((c, v * k) for c, v in curve), Notes()
    computed = {"ceiling_tok_s": Provenance.COMPUTED}
    if draft is not None and read_now and drafted is not None and target_bytes_now and ceiling_now > 0:
        # the draft's bytes cost what the target's cost at this depth, per byte (the same devices, the same bus): at a
        # depth whose one-token ceiling is v, the target's step reads ceiling_now × target_bytes_now ÷ v such bytes
        budget = ceiling_now * target_bytes_now
        lifted_curve = tuple((c, x) for c, v in curve if v > 0 and (d := draft.read_bytes(c)) is not None and (
            x := speculative_ceiling(v, k, drafted, d, budget / v)) is not None)
        now = speculative_ceiling(ceiling_now, k, drafted, read_now, target_bytes_now)
        kv_now = draft.kv_read_bytes(depth) or 0.0
        how = (f"speculative decoding: {k:.2f} tokens per target step and {drafted:.2f} drafted ones, each reading the "
               f"drafter's weights ({draft.name}: {fmt_bytes(draft.read_weight_bytes)}) and {fmt_bytes(kv_now)} of "
               f"its KV cache at this depth: {now or 0:.1f} tok/s against the one-token {ceiling_now:.1f}")
        return spec, now, lifted_curve, Notes(computed, {"ceiling.speculative": how})
    why = ("no draft model or MTP layers kvmon knows of: n-gram lookup, or a drafter the server's command line "
           "does not show" if draft is None
           else f"{draft.name}'s size or shape is not known" if not read_now
           else "the target's bytes per token are not known")
    how = (f"speculative decoding: {k:.2f} tokens per target step since the server started, so the ceiling is "
           f"{k:.2f} × the one-token {ceiling_now:.1f} tok/s; the drafter's own reads are not counted ({why}): an "
           "upper bound")
    return spec, ceiling_now * k, tuple((c, v * k) for c, v in curve), Notes(computed, {"ceiling.speculative": how})


def withheld(fc: Forecast, spec: SpeculativeView | None) -> tuple[Forecast, Notes]:
    """The forecast without its speeds while the server speculates: it models one token per step, and how
    acceptance changes with depth is not known, so its curve would contradict what is measured."""
    if spec is None or not (fc.milestones or fc.curve):
        return fc, Notes()
    per_step = f" ({spec.tokens_per_step:.2f} tokens per step)" if spec.tokens_per_step else ""
    why = (f"unknown: the forecast models one token per step, and the server speculates{per_step}; how acceptance "
           "changes with depth is not known")
    return replace(fc, milestones=(), curve=()), Notes(reasons={"forecast.milestones": why})
