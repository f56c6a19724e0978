"""The chips of a router's or llama-swap's models: a running model's speed and context in a few words, another's
status as a person reads it, and the tooltip with the rest."""

from __future__ import annotations

from kvmon.core.serving import ServedModel
from kvmon.gui.panels.models import chip_text, chip_tip

GIB = 2**30


def test_a_running_model_shows_its_speed_and_context() -> None:
    m = ServedModel("qwen3-8b", "loaded", decode_tok_s=41.6, context_tokens=12_345, n_ctx=32_768)
    assert chip_text(m) == "qwen3-8b · 41.6 tok/s · 12.3K/32.8K"
    assert chip_text(ServedModel("qwen3-8b", "loaded", processing=False)) == "qwen3-8b · idle"


def test_a_model_that_does_not_run_shows_its_status() -> None:
    assert chip_text(ServedModel("gemma-3-12b", "loading", progress=0.42)) == "gemma-3-12b · loading 42 %"
    assert chip_text(ServedModel("gpt-oss-20b", "failed")) == "gpt-oss-20b · failed"
    assert chip_text(ServedModel("gpt-oss-20b", "sleeping")) == "gpt-oss-20b · sleeping"


def test_the_tooltip_says_the_rest_and_how_to_follow_a_model() -> None:
    m = ServedModel("qwen3-8b", "loaded", followed=True, context_tokens=12_345, n_ctx=32_768, n_slots=2,
                    kv_allocated_bytes=4 * GIB, kv_in_use_bytes=GIB, weight_bytes=5 * GIB, alerts=1,
                    note="sleeping soon")
    lines = chip_tip(m).splitlines()
    assert lines[0] == "qwen3-8b: loaded — shown now"
    assert lines[1].startswith("Context 12.3K tokens in use of ") and lines[1].endswith(" per slot, 2 slots")
    assert lines[2:6] == ["KV cache 1.00 GiB in use of 4.00 GiB", "Weights 5.00 GiB", "1 warning(s) on this model",
                          "sleeping soon"]
    assert lines[-1].startswith("Click to show this model")


def test_the_row_follows_each_poll_and_a_click_says_chosen(qapp: object) -> None:
    """A model's new speed shows on its chip at the next poll; one clicked is followed and the title says so; a model
    gone from the server loses its chip."""
    from dataclasses import replace

    from kvmon.core.serving import ServingView
    from kvmon.core.snapshot import Connection, ConnectionStatus, Snapshot
    from kvmon.gui.panels.models import ModelsPanel

    a = ServedModel("qwen3-8b", "loaded", followed=True, decode_tok_s=41.6)
    b = ServedModel("gemma-3-12b", "sleeping")
    v = ServingView("llama-server router", (a, b), followed="qwen3-8b", follow_reason="generating")
    s = Snapshot(seq=1, t_monotonic=0.0, t_wall=0.0, connection=Connection(ConnectionStatus.CONNECTED), serving=v)
    panel = ModelsPanel()
    panel.update_snapshot(s)
    assert panel.title == "llama-server router · showing qwen3-8b (generating)"
    assert panel.chips["qwen3-8b"].whole_text() == "● qwen3-8b · 41.6 tok/s"
    faster = replace(v, models=(replace(a, decode_tok_s=52.0), b))
    panel.update_snapshot(replace(s, seq=2, serving=faster))
    assert panel.chips["qwen3-8b"].whole_text() == "● qwen3-8b · 52.0 tok/s"
    panel.chips["qwen3-8b"].click()
    panel.update_snapshot(replace(s, seq=3, serving=faster))
    assert panel.title == "llama-server router · showing qwen3-8b (chosen)"
    panel.update_snapshot(replace(s, seq=4, serving=replace(faster, models=(replace(a, decode_tok_s=52.0),))))
    assert list(panel.chips) == ["qwen3-8b"]
