"""Speculative decoding's tokens per step, the ceiling it lifts and the forecast it withholds."""

from __future__ import annotations

import math

import pytest
from repo_paths import FIXTURES

from kvmon.core.analysis.notes import Notes
from kvmon.core.analysis.speculation import lifted, speculation, withheld
from kvmon.core.readings import Provenance, ServerReading
from kvmon.core.snapshot import Forecast, Milestone
from kvmon.physics.ceiling import speculative_tokens_per_step


def _reading(**metrics: float) -> ServerReading:
    return ServerReading(t_monotonic=0.0, t_wall=0.0, backend="llama-server", url="http://127.0.0.1:9931",
                         metrics=metrics)


def test_tokens_per_step_from_generated_and_accepted() -> None:
    assert speculative_tokens_per_step(96, 48) == 2.0  # 48 steps of one own token plus one accepted
    assert speculative_tokens_per_step(100, 0) == 1.0
    for bad in ((0, 0), (10, 10), (10, 11), (10, -1), (math.nan, 1)):
        assert speculative_tokens_per_step(*bad) is None


def test_the_counts_lift_the_ceiling_and_its_curve() -> None:
    spec, _ = speculation(_reading(spec_decode_num_drafts_total=40, spec_decode_num_draft_tokens_total=120,
                                   spec_decode_num_accepted_tokens_total=60, tokens_predicted_total=150))
    assert spec is not None and spec.tokens_per_step == 150 / 90 and spec.acceptance_rate == 0.5
    spec2, ceiling, curve, notes = lifted(spec, 30.0, ((0, 33.0), (8192, 30.0)))
    assert spec2 is not None and spec2.one_token_ceiling_tok_s == 30.0
    assert math.isclose(ceiling or 0, 50.0) and [round(v, 6) for _, v in curve] == [55.0, 50.0]
    assert "upper bound" in notes.reasons["ceiling.speculative"] and notes.provenance["ceiling_tok_s"] == "computed"


def test_no_drafts_no_speculation_and_counts_that_do_not_add_up_are_said() -> None:
    assert speculation(_reading(tokens_predicted_total=100))[0] is None
    assert speculation(_reading(spec_decode_num_drafts_total=0)) == (None, Notes())
    odd, notes = speculation(_reading(spec_decode_num_drafts_total=5, spec_decode_num_accepted_tokens_total=20,
                                      tokens_predicted_total=10))
    assert odd is not None and odd.tokens_per_step is None and "do not add up" in notes.reasons["speculative"]
    _, ceiling, _, notes = lifted(odd, 30.0, ())
    assert ceiling is None  # no factor known: only the one-token floor is
    assert "not counted yet" in notes.reasons["ceiling_tok_s"]


def test_the_one_token_forecast_is_withheld_while_the_server_speculates() -> None:
    spec, _ = speculation(_reading(spec_decode_num_drafts_total=40, spec_decode_num_draft_tokens_total=120,
                                   spec_decode_num_accepted_tokens_total=60, tokens_predicted_total=150))
    fc = Forecast(milestones=(Milestone(8192, 20.0, 18.0, 22.0, 30.0),), curve=((8192, 20.0, 18.0, 22.0),))
    out, notes = withheld(fc, spec)
    assert out.milestones == () and out.curve == () and "speculates" in notes.reasons["forecast.milestones"]
    assert withheld(fc, None)[0] is fc


def test_the_header_says_the_ceiling_is_speculative() -> None:
    from dataclasses import replace

    from kvmon.core.snapshot import Activity, Connection, ConnectionStatus, Snapshot
    from kvmon.gui.fmt import hero

    spec, _ = speculation(_reading(spec_decode_num_drafts_total=40, spec_decode_num_draft_tokens_total=120,
                                   spec_decode_num_accepted_tokens_total=60, tokens_predicted_total=150))
    s = Snapshot(seq=1, t_monotonic=1.0, t_wall=1.0, connection=Connection(ConnectionStatus.CONNECTED),
                 decode_tok_s=42.0, activity=Activity.DECODING, ceiling_tok_s=50.0, efficiency=0.84, speculative=spec)
    assert hero(s).against == "of 50.0 ceiling (speculative, 1.67 tokens/step) · 84%"
    assert hero(replace(s, speculative=None)).against == "of 50.0 ceiling · 84%"
    uncounted = replace(s, ceiling_tok_s=None, efficiency=None,
                        speculative=replace(spec, tokens_per_step=None)) if spec is not None else s
    w = hero(uncounted)
    assert w.against == "speculating: its ceiling is known once a reply ends" and not w.share


def test_a_server_that_speculates_before_any_reply_ended_has_no_ceiling_yet() -> None:
    from kvmon.core.readings import SlotReading

    r = ServerReading(t_monotonic=0.0, t_wall=0.0, backend="llama-server", url="http://127.0.0.1:9931",
                      metrics_enabled=True, metrics={"spec_decode_num_drafts_total": 0.0},
                      slots=(SlotReading(0, 4096, 1200, True, speculative=True),))
    spec, notes = speculation(r)
    assert spec is not None and spec.tokens_per_step is None and "when a reply ends" in notes.reasons["speculative"]
    before = Notes({"ceiling_tok_s": Provenance.COMPUTED})
    spec, ceiling, curve, notes = lifted(spec, 30.0, ((0, 33.0),))
    assert ceiling is None and curve == () and "ceiling_tok_s" not in before.then(notes).provenance
    assert spec is not None and spec.one_token_ceiling_tok_s == 30.0
    assert "not counted yet" in notes.reasons["ceiling_tok_s"]


def test_vllm_counts_speculation_under_the_same_names_beside_its_own_generated_counter() -> None:

    from kvmon.sources.vllm import VLLM
    from kvmon.sources.vllm.parse import parse_metrics
    from kvmon.sources.vllm.source import _counters

    text = (FIXTURES / "vllm" / "metrics.v1.txt").read_text()
    labels = '{engine="0",model_name="Qwen/Qwen3-8B"}'
    text += "".join(f"# TYPE vllm:{n} counter\nvllm:{n}_total{labels} {v}\n" for n, v in (
        ("spec_decode_num_drafts", 9000.0), ("spec_decode_num_draft_tokens", 27000.0),
        ("spec_decode_num_accepted_tokens", 20000.0)))
    mm = parse_metrics(text).models["Qwen/Qwen3-8B"]
    assert (mm.spec_drafts_total, mm.spec_draft_tokens_total, mm.spec_accepted_tokens_total) == (9000, 27000, 20000)
    r = ServerReading(t_monotonic=0.0, t_wall=0.0, backend=VLLM, url="http://127.0.0.1:8000", metrics=_counters(mm))
    spec, _ = speculation(r)
    assert spec is not None and spec.generated_tokens == 52011
    assert math.isclose(spec.tokens_per_step or 0, 52011 / (52011 - 20000))
    assert math.isclose(spec.acceptance_rate or 0, 20000 / 27000)


def test_the_draft_models_reads_are_in_the_speculative_ceiling() -> None:
    """A target step reads the target once (1/one-token seconds) and the draft once per drafted token, at the same
    cost per byte: a 7B draft's 0.5 GB against an 8 GB step with 4 drafted tokens adds a quarter of a step."""
    from kvmon.physics.ceiling import speculative_ceiling

    assert speculative_ceiling(50.0, 2.5, 4.0, 0.5e9, 8e9) == pytest.approx(2.5 / (1 / 50 * 1.25))
    assert speculative_ceiling(50.0, 2.5, 0.0, 0.5e9, 8e9) == pytest.approx(125.0)  # nothing drafted: k × one
    assert speculative_ceiling(50.0, 2.0, 3.0, 8e9, 8e9) == pytest.approx(25.0)  # an equal draft: a loss
    for bad in ((0.0, 2.0, 1.0, 1e9, 8e9), (50.0, 2.0, -1.0, 1e9, 8e9), (50.0, 2.0, 1.0, 1e9, 0.0),
                (math.nan, 2.0, 1.0, 1e9, 8e9)):
        assert speculative_ceiling(*bad) is None


def _drafter(weight_bytes: int | None, shape: object = None, type_k: str = "f16"):  # type: ignore[no-untyped-def]
    from kvmon.core.analysis.draft import DraftContext

    return DraftContext(name="draft model 'd.gguf'", weight_bytes=weight_bytes, read_weight_bytes=weight_bytes,
                        shape=shape, type_k=type_k, type_v=type_k)


def test_a_draft_model_on_another_machine_leaves_an_upper_bound_and_says_why() -> None:
    from kvmon.core.snapshot import SpeculativeView

    spec = SpeculativeView(drafts=10, draft_tokens=30, accepted_tokens=15, generated_tokens=30, tokens_per_step=2.0)
    out, ceiling, _curve, notes = lifted(spec, 100.0, ((0, 100.0),), draft=_drafter(None), target_bytes_now=8e9)
    assert ceiling == pytest.approx(200.0) and "an upper bound" in notes.reasons["ceiling.speculative"]
    assert "size or shape is not known" in notes.reasons["ceiling.speculative"]
    assert out is not None and out.drafted_per_step == pytest.approx(2.0)
    out, ceiling, _curve, notes = lifted(spec, 100.0, ((0, 100.0),), draft=None, target_bytes_now=8e9)
    assert ceiling == pytest.approx(200.0)
    assert "no draft model or MTP layers kvmon knows of" in notes.reasons["ceiling.speculative"]


def test_the_draft_contexts_kv_reads_are_in_the_speculative_ceiling() -> None:
    """Each drafted token reads the draft's weights and its KV cache at this depth: deeper, the draft costs more."""
    from tiny_gguf import metadata

    from kvmon.core.snapshot import SpeculativeView
    from kvmon.physics.kv import kv_bytes_in_use
    from kvmon.physics.shape import ModelShape

    shape = ModelShape.from_gguf(metadata("llama-draft"))  # one layer, 2 KV heads of 32: 256 B per token in f16
    spec = SpeculativeView(drafts=10, draft_tokens=30, accepted_tokens=15, generated_tokens=30, tokens_per_step=2.0)
    curve = ((0, 100.0), (1_000_000, 50.0))
    out, ceiling, lifted_curve, notes = lifted(spec, 80.0, curve, draft=_drafter(1_000_000_000, shape),
                                               context_tokens=500_000, target_bytes_now=10e9)
    kv_now = kv_bytes_in_use(shape, 500_000)
    assert kv_now == 256 * 500_000
    assert out is not None and out.draft_bytes_per_token == pytest.approx(1e9 + kv_now)
    step = 1 / 80.0 * (1 + 2.0 * (1e9 + kv_now) / 10e9)  # two drafted tokens per step, each at the target's cost
    assert ceiling == pytest.approx(2.0 / step)
    budget = 80.0 * 10e9  # bytes per second: the target's cost per byte at every depth
    for (c, v), (c2, x) in zip(curve, lifted_curve, strict=True):
        d = 1e9 + kv_bytes_in_use(shape, c)
        assert c2 == c and x == pytest.approx(2.0 / (1 / v + 2.0 * d / budget))
    assert "KV cache at this depth" in notes.reasons["ceiling.speculative"]
    no_kv, *_ = lifted(spec, 80.0, curve, draft=_drafter(1_000_000_000, shape), context_tokens=0,
                       target_bytes_now=10e9)
    assert no_kv is not None and no_kv.draft_bytes_per_token == pytest.approx(1e9)


PER_POS_PAGE = """\
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 64
# HELP llamacpp:spec_decode_num_draft_tokens_total Speculative: Total draft tokens generated
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total 96
# HELP llamacpp:spec_decode_num_accepted_tokens_total Speculative: Total draft tokens accepted by the target model
# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter
llamacpp:spec_decode_num_accepted_tokens_total 30
# HELP llamacpp:spec_decode_num_drafts_total Speculative: Total speculative decoding verification steps
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total 32
# HELP llamacpp:requests_processing Number of requests processing
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 0
# HELP llamacpp:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position
# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 16
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 10
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 4
"""


def test_acceptance_by_position_is_read_and_shared_by_drafts() -> None:
    """llama-server's page as it writes it (its layout; these counts from a run with synthetic acceptance): the
    per-position counter is read one key per position, and each position's share of the drafts is its acceptance
    rate."""
    from kvmon.sources.llamacpp.parse import parse_metrics

    fast = parse_metrics(PER_POS_PAGE)
    assert fast['spec_decode_num_accepted_tokens_per_pos_total{position="1"}'] == 10
    spec, notes = speculation(_reading(**fast))
    assert spec is not None and spec.accepted_by_position == (16, 10, 4)
    assert spec.acceptance_by_position == pytest.approx((16 / 32, 10 / 32, 4 / 32))
    assert "speculative.by_position" not in notes.reasons
    # a gap or a bent label is not a position; a page whose counts do not add up shows none, and says why
    bent = PER_POS_PAGE.replace('{position="2"}', '{position="x2"}')
    assert len([k for k in parse_metrics(bent) if "pos" in k]) == 2
    spec, notes = speculation(_reading(**parse_metrics(bent)))
    assert spec is not None and spec.accepted_by_position == () and spec.acceptance_by_position == ()
    assert "do not add up to its 30 accepted tokens in 32 drafts" in notes.reasons["speculative.by_position"]
    rising = PER_POS_PAGE.replace('{position="0"} 16', '{position="0"} 4').replace('{position="2"} 4',
                                                                                   '{position="2"} 16')
    spec, notes = speculation(_reading(**parse_metrics(rising)))
    assert spec is not None and spec.acceptance_by_position == () and "speculative.by_position" in notes.reasons


def test_vllm_acceptance_by_position_adds_up_over_its_engines() -> None:

    from kvmon.sources.vllm import VLLM
    from kvmon.sources.vllm.parse import parse_metrics
    from kvmon.sources.vllm.source import _counters

    text = (FIXTURES / "vllm" / "metrics.v1.txt").read_text()
    lines = ["# TYPE vllm:spec_decode_num_drafts counter", "# TYPE vllm:spec_decode_num_accepted_tokens counter",
             "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter"]
    for engine, (drafts, per_pos) in enumerate(((400, (300, 200)), (600, (500, 100)))):
        labels = f'engine="{engine}",model_name="Qwen/Qwen3-8B"'
        lines += [f"vllm:spec_decode_num_drafts_total{{{labels}}} {drafts}",
                  f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {sum(per_pos)}"]
        lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{p}"}} {n}'
                  for p, n in enumerate(per_pos)]
    lines.append('vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="Qwen/Qwen3-8B",'
                 'position="99"} 1')  # past any draft: left out, and noted
    page = parse_metrics(text + "\n".join(lines) + "\n")
    mm = page.models["Qwen/Qwen3-8B"]
    assert mm.spec_accepted_per_position == (800, 300)
    assert any("position that is not a draft's" in n for n in page.notes)
    r = ServerReading(t_monotonic=0.0, t_wall=0.0, backend=VLLM, url="http://127.0.0.1:8000", metrics=_counters(mm))
    spec, _ = speculation(r)
    assert spec is not None and spec.acceptance_by_position == pytest.approx((0.8, 0.3))


def test_acceptance_by_position_in_json_exporter_recording_and_on_screen() -> None:
    import dataclasses
    import json

    from synthetic import SyntheticMonitor

    from kvmon.core.recorder import snapshot_from_dict, snapshot_to_dict
    from kvmon.core.report_json import snapshot_to_json
    from kvmon.core.report_prometheus import snapshot_families
    from kvmon.core.snapshot import SpeculativeView
    from kvmon.gui.fmt import speculation_text

    spec = SpeculativeView(drafts=32, draft_tokens=96, accepted_tokens=30, generated_tokens=64,
                           tokens_per_step=64 / 34, acceptance_rate=30 / 96, accepted_by_position=(16, 10, 4),
                           acceptance_by_position=(0.5, 0.3125, 0.125))
    s = dataclasses.replace(SyntheticMonitor().snapshot(3), speculative=spec)
    doc = snapshot_to_json(s)
    assert doc["speculative"]["accepted_by_position"] == [16, 10, 4]
    assert doc["speculative"]["acceptance_by_position"] == [0.5, 0.3125, 0.125]
    fam = {f.name: f for f in snapshot_families(s, backend="llama-server", server="http://127.0.0.1:8080")}
    samples = fam["kvmon_speculative_acceptance_by_position_ratio"].samples
    assert [(x.labels["position"], x.value) for x in samples] == [("0", 0.5), ("1", 0.3125), ("2", 0.125)]
    back = snapshot_from_dict(json.loads(json.dumps(snapshot_to_dict(s))))
    assert back.speculative == spec
    assert speculation_text(s) == ("Speculative decoding: 1.88 tokens per target step; 31% of drafted tokens "
                                   "accepted; by draft position 1st 50%, 2nd 31%, 3rd 12% of drafts")
