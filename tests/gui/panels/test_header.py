"""The header as a person reads it: the verdict's sentence in its level's colour, the big number always decode tok/s
(the last one dimmed, with its age, while nothing decodes), the prompt in a slot of its own, rows that never move
with the text, and server-given names shown exactly as written (plain text, on each route a name comes by)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6 import QtCore, QtGui, QtWidgets
from synthetic import SyntheticMonitor

from kvmon.core.snapshot import (
    Activity,
    Alert,
    AlertLevel,
    CeilingSuspect,
    Connection,
    ConnectionStatus,
    LastDecode,
    Snapshot,
    SpeculativeView,
)
from kvmon.core.verdict import decided
from kvmon.gui import theme
from kvmon.gui.fmt import num_tok_s
from kvmon.gui.panels.header import HeaderPanel

MARKUP = "<b>BOLD</b>"


@pytest.fixture
def header(qapp: QtWidgets.QApplication) -> Iterator[HeaderPanel]:
    h = HeaderPanel()
    h.resize(1240, 120)
    h.show()
    yield h
    h.close()
    h.deleteLater()


def colour(label: QtWidgets.QLabel) -> str:
    return label.palette().color(QtGui.QPalette.ColorRole.WindowText).name()


def test_it_shows_the_verdict_and_the_numbers_of_a_decoding_poll(header: HeaderPanel) -> None:
    mon = SyntheticMonitor(tokens_per_poll=500)
    for _ in range(20):
        s = mon.poll()
        header.update_snapshot(s)
    assert s.verdict is not None and header.headline.whole() == s.verdict.sentence
    assert header.headline.whole() == f"{s.efficiency * 100:.0f}% of the memory-bus ceiling at 11.2K tokens"
    assert colour(header.headline) == theme.hex_color("ok")
    assert (header.backend.whole(), header.version.whole()) == ("llama-server", "b11549")
    assert header.model.whole() == "Meta-Llama-3.1-8B-Instruct" and header.details.whole() == "llama · 8.0B · Q8_0"
    assert header.gpus.whole() == "2× NVIDIA GeForce RTX 3090"
    assert header.context.whole() == "context 11.2K of 32.8K tokens"
    assert header.speed.whole() == f"{s.decode_tok_s:.1f} tok/s" and colour(header.speed) == theme.hex_color("decode")
    assert header.efficiency.whole() == f"of {num_tok_s(s.ceiling_tok_s)} ceiling · {s.efficiency * 100:.0f}%"
    tip = header.speed.toolTip() + header.efficiency.toolTip()
    assert "Source: measured (the server's counters" in tip and "Source: computed by kvmon" in tip
    assert "_" not in tip and "?" not in tip


def test_the_big_number_is_always_decode_speed_dimmed_with_its_age_while_nothing_decodes(header: HeaderPanel) -> None:
    s = SyntheticMonitor().snapshot(10)
    base = dataclasses.replace(s, decode_tok_s=None, efficiency=None, t_monotonic=s.t_monotonic + 12,
                               last_decode=LastDecode(70.2, s.t_monotonic, s.t_wall, 5000))
    for act, prefill in ((Activity.IDLE, None), (Activity.LOADING, None), (Activity.PROCESSING, 6346.0)):
        header.update_snapshot(decided(dataclasses.replace(base, activity=act, prefill_tok_s=prefill)))
        assert header.speed.whole() == "70.2 tok/s" and colour(header.speed) == theme.hex_color("muted"), act
        assert header.efficiency.whole().startswith("last reply, 12 s ago"), act
    assert header.prompt.whole() == "prompt 6,346 tok/s"  # the prompt's own, smaller slot
    header.update_snapshot(decided(dataclasses.replace(base, activity=Activity.IDLE)))
    assert header.efficiency.whole() == f"last reply, 12 s ago · ceiling {num_tok_s(s.ceiling_tok_s)} tok/s here"
    assert header.prompt.whole() == ""
    never = decided(dataclasses.replace(base, activity=Activity.IDLE, last_decode=None))
    header.update_snapshot(never)
    assert header.speed.whole() == "— tok/s" and header.efficiency.whole().startswith("no reply measured yet")


def test_a_warning_colours_the_headline_and_the_rows_stay_put(header: HeaderPanel) -> None:
    """Rows are decided by the width: a sentence twice as long (or a shorter one) moves nothing below it."""
    s = SyntheticMonitor().snapshot(10)
    header.update_snapshot(s)
    QtWidgets.QApplication.processEvents()
    where = (header.context.geometry(), header.speed.geometry(), header.height())
    spill = Alert(AlertLevel.CRITICAL, "kv_in_host", "KV cache in host RAM …",
                  headline="Spilled: 2.83 GiB of the weights and 9.50 GiB of the KV cache in host RAM — capped at "
                           "~11 tok/s (72 tok/s before the reload) " * 3)
    header.update_snapshot(decided(dataclasses.replace(s, seq=11, alerts=(spill,))))
    QtWidgets.QApplication.processEvents()
    assert colour(header.headline) == theme.hex_color("critical")
    assert header.headline.text().endswith("…") and header.headline.toolTip().startswith("Spilled: 2.83 GiB")
    assert (header.context.geometry(), header.speed.geometry(), header.height()) == where


def test_a_server_that_cannot_be_read_says_so_in_the_headlines_place(header: HeaderPanel) -> None:
    gone = decided(Snapshot(seq=1, t_monotonic=1.0, t_wall=1.7e9, connection=Connection(
        ConnectionStatus.UNREACHABLE, "cannot connect to http://127.0.0.1:1 (Connection refused)")))
    header.update_snapshot(gone)
    assert header.headline.whole().startswith("Cannot connect to http://127.0.0.1:1 (Connection refused). Is the "
                                              "server running?")
    assert colour(header.headline) == theme.hex_color("critical")
    assert header.speed.whole() == "— tok/s" and header.efficiency.whole() == "no reply measured yet"
    # no row of dashes for what was never read
    assert [w.whole() for w in (header.backend, header.model, header.gpus, header.context, header.kv)] == [""] * 5


def test_an_uncertain_ceiling_and_speculation_are_said_beside_the_number(header: HeaderPanel) -> None:
    s = SyntheticMonitor().snapshot(5)
    suspect = CeilingSuspect("placement", "measured 11.0 tok/s exceeds the computed ceiling of 10.9 tok/s, so …")
    header.update_snapshot(decided(dataclasses.replace(s, efficiency=None, ceiling_suspect=suspect)))
    assert "ceiling uncertain" in header.efficiency.whole() and "%" not in header.efficiency.whole()
    assert suspect.message in header.efficiency.toolTip()
    assert "where kvmon thinks the model lives is likely wrong" in header.headline.whole()
    spec = SpeculativeView(drafts=32, draft_tokens=96, accepted_tokens=30, generated_tokens=64,
                           tokens_per_step=64 / 34, acceptance_rate=30 / 96, accepted_by_position=(16, 10, 4),
                           acceptance_by_position=(0.5, 0.3125, 0.125), one_token_ceiling_tok_s=100.0)
    header.update_snapshot(decided(dataclasses.replace(s, seq=6, speculative=spec)))
    assert "(speculative, 1.88 tokens/step)" in header.efficiency.whole()
    assert "by draft position 1st 50%, 2nd 31%, 3rd 12% of drafts" in header.efficiency.toolTip()


def test_texts_are_set_only_when_they_change(header: HeaderPanel, monkeypatch: pytest.MonkeyPatch) -> None:
    mon = SyntheticMonitor(tokens_per_poll=400)
    header.update_snapshot(mon.poll())
    calls: list[str] = []
    for name in ("model", "gpus", "backend", "context", "speed", "headline"):
        label = getattr(header, name)
        monkeypatch.setattr(label, "setText", lambda t, _n=name, _l=label: (calls.append(_n),
                                                                           QtWidgets.QLabel.setText(_l, t)))
    s = mon.poll()
    header.update_snapshot(s)
    assert {"context", "speed"} <= set(calls) and not {"model", "gpus", "backend"} & set(calls)
    calls.clear()
    header.update_snapshot(dataclasses.replace(s, seq=s.seq + 1))  # the same figures: nothing is set
    assert calls == []


@pytest.mark.parametrize("width", [1280, 1024, 800])
def test_no_text_overlaps_at_the_widths_people_use(qapp: QtWidgets.QApplication, width: int) -> None:
    h = HeaderPanel()
    h.resize(width - 12, 120)
    h.show()
    try:
        for s in (SyntheticMonitor(tokens_per_poll=500).snapshot(20),):
            h.update_snapshot(s)
            QtWidgets.QApplication.processEvents()
            shown = [w for w in (h.backend, h.version, h.model, h.details, h.gpus, h.headline, h.speed, h.efficiency,
                                 h.prompt, h.context, h.kv) if w.isVisible() and w.text()]
            where = {w: QtCore.QRect(w.mapTo(h, QtCore.QPoint(0, 0)), w.size()) for w in shown}
            for i, a in enumerate(shown):
                assert h.rect().contains(where[a]) and not a.elided, (width, a.text())  # whole, on more rows
                for b in shown[i + 1:]:
                    assert not where[a].intersects(where[b]), (width, a.text(), b.text())
            assert h.speed.text() == h.speed.whole()  # the big number is never cut
    finally:
        h.close()
        h.deleteLater()


# ------------------------------------------------------------------ a model's name, as each route gives it


def _show(header: HeaderPanel, monitor: object) -> None:
    with monitor:  # type: ignore[attr-defined]
        snap = monitor.poll()  # type: ignore[attr-defined]
    header.update_snapshot(snap)


def _assert_literal(header: HeaderPanel) -> None:
    assert header.model.whole() == MARKUP and header.model.text() == MARKUP
    assert header.model.textFormat() == QtGui.Qt.TextFormat.PlainText


def test_a_llama_server_alias_with_markup_shows_literally(header: HeaderPanel, fixture_server: object) -> None:
    from helpers_http import LLAMA_FIXTURES, serve_llama_state

    from kvmon.app.build import open_monitor

    serve_llama_state(fixture_server, "idle")  # type: ignore[arg-type]
    props = json.loads((LLAMA_FIXTURES / "props.idle.json").read_text())
    props["model_alias"] = MARKUP
    fixture_server.set("/props", 200, json.dumps(props))  # type: ignore[attr-defined]
    _show(header, open_monitor(fixture_server.url, gpu=False, host=False))  # type: ignore[attr-defined]
    _assert_literal(header)


def test_a_gguf_general_name_with_markup_shows_literally(header: HeaderPanel, fixture_server: object,
                                                          tmp_path: Path) -> None:
    import gguf
    import numpy as np
    from helpers_http import LLAMA_FIXTURES, serve_llama_state

    from kvmon.app.build import open_monitor

    model = tmp_path / "tiny.gguf"
    w = gguf.GGUFWriter(str(model), "llama")
    w.add_name(MARKUP)
    for key, value in (("block_count", 4), ("context_length", 32768), ("embedding_length", 256),
                       ("feed_forward_length", 512), ("attention.head_count", 4), ("attention.head_count_kv", 2)):
        w.add_uint32(f"llama.{key}", value)
    w.add_tensor("token_embd.weight", np.zeros((64, 32), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    serve_llama_state(fixture_server, "idle")  # type: ignore[arg-type]
    props = json.loads((LLAMA_FIXTURES / "props.idle.json").read_text())
    props["model_path"] = props["model_alias"] = str(model)  # started without --alias: the path is its name
    fixture_server.set("/props", 200, json.dumps(props))  # type: ignore[attr-defined]
    _show(header, open_monitor(fixture_server.url, gpu=False, host=False))  # type: ignore[attr-defined]
    _assert_literal(header)


def test_an_ollama_model_name_with_markup_shows_literally(header: HeaderPanel) -> None:
    from ollama_fixture import OllamaFixture, fixture_bytes

    from kvmon.app.build import open_monitor

    ps = json.loads(fixture_bytes("ps.full-offload.json"))
    ps["models"][0]["name"] = ps["models"][0]["model"] = MARKUP
    ollama = OllamaFixture()
    try:
        ollama.overrides["/api/ps"] = (200, json.dumps(ps).encode())
        _show(header, open_monitor(ollama.url, gpu=False, host=False))
    finally:
        ollama.stop()
    _assert_literal(header)


class LayoutRequests(QtCore.QObject):
    """Counts the layout requests (a new layout of the header, and so of the window) a widget receives."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def eventFilter(self, obj: QtCore.QObject, ev: QtCore.QEvent) -> bool:
        if ev.type() == QtCore.QEvent.Type.LayoutRequest:
            self.count += 1
        return False


@pytest.mark.parametrize("size", [(1280, 800), (800, 600)])
def test_a_new_figure_repaints_its_label_and_asks_nothing_of_the_windows_layout(qtbot, tmp_path: Path,
                                                                                 size: tuple[int, int]) -> None:
    """Polls of one model with new figures, a new sentence and a new prompt speed: no label moves, and the
    header (and so the window) is not laid out again."""
    from kvmon.gui.main_window import MainWindow
    from kvmon.gui.settings import Settings

    win = MainWindow(Settings(str(tmp_path / "s.ini")), tray=False)
    qtbot.addWidget(win)
    win.resize(*size)
    win.show()
    qtbot.waitExposed(win)
    mon = SyntheticMonitor(tokens_per_poll=400)
    win.on_snapshot(mon.poll())
    QtWidgets.QApplication.processEvents()
    h = win.header
    labels = (h.headline, h.speed, h.efficiency, h.prompt, h.context, h.kv, h.model, h.gpus)
    where = [(w.mapTo(win, QtCore.QPoint(0, 0)), w.size()) for w in labels]
    counter = LayoutRequests()
    h.installEventFilter(counter)
    shown = set()
    for i in range(6):
        s = mon.poll()
        if i == 3:  # another sentence, and the prompt's own slot
            s = decided(dataclasses.replace(s, activity=Activity.PROCESSING, prefill_tok_s=6346.0,
                                            decode_tok_s=None, efficiency=None))
        win.on_snapshot(s)
        QtWidgets.QApplication.processEvents()
        shown.add((h.speed.text(), h.headline.text(), h.context.text(), h.prompt.text()))
    assert len(shown) == 6  # every poll showed new figures
    assert counter.count == 0
    assert [(w.mapTo(win, QtCore.QPoint(0, 0)), w.size()) for w in labels] == where


def test_the_last_prompt_line_reads_whole_in_a_narrow_window(qapp) -> None:
    """"last prompt 5,200 tok/s · first token 9 ms" under the big number takes the room the live row leaves beside
    it (and says "prompt …" where even that is short): whole at 1280, 1024 and 800 pixels, over no other text."""
    from kvmon.core.snapshot import LatencyView

    mon = SyntheticMonitor(tokens_per_poll=500)
    for _ in range(20):
        s = mon.poll()
    s = decided(dataclasses.replace(s, latency=LatencyView(replies=3, ttft_last_s=0.009, last_prefill_tok_s=5200.0)))
    for width in (1240, 1000, 780):
        h = HeaderPanel()
        h.resize(width, 120)
        h.show()
        h.update_snapshot(s)
        QtWidgets.QApplication.processEvents()
        h.resize(width, h.heightForWidth(width))
        QtWidgets.QApplication.processEvents()
        assert h.prompt.whole() in ("last prompt 5,200 tok/s · first token 9 ms",
                                    "prompt 5,200 tok/s · first token 9 ms"), width
        assert not h.prompt.elided and h.prompt.text() == h.prompt.whole(), width
        assert h.rect().contains(h.prompt.geometry()), width
        for other in (h.context, h.kv, h.headline, h.efficiency, h.speed):
            assert not h.prompt.geometry().intersects(other.geometry()), (width, other.whole())
        tip = h.prompt.toolTip()
        h.close()
        h.deleteLater()
    assert "The last prompt's" in tip  # the fewer words still say whose they are


def test_the_share_says_why_below_the_ceiling_and_the_prompt_line_the_next_reply_wait(qapp) -> None:
    """The causes of the gap in the share's tooltip, and the next reply's predicted first token beside the last
    prompt's (how it is predicted on hover), whole at 1280, 1024 and 800 pixels beside the whole context line."""
    from kvmon.core.snapshot import LatencyView, PromptCacheView, SlowdownCause

    mon = SyntheticMonitor(tokens_per_poll=500)
    for _ in range(20):
        s = mon.poll()
    cause = SlowdownCause("memory_clock", 0.65, "memory clock at 60% of its maximum (power cap)",
                          "GPU 0's memory clock is at 6,300 of 10,500 MHz (60%) while it decodes (power cap)")
    cache = PromptCacheView(source="each reply's timings", reads=3, reread_tokens=30000, reused_tokens=1000,
                            misses=3, next_ttft_s=2.34, next_prompt_tokens=11500)
    s = decided(dataclasses.replace(s, slowdown_causes=(cause,), prompt_cache=cache,
                                    latency=LatencyView(replies=3, ttft_last_s=0.009, last_prefill_tok_s=5200.0)))
    for width in (1240, 1000, 780):
        h = HeaderPanel()
        h.resize(width, 120)
        h.show()
        h.update_snapshot(s)
        QtWidgets.QApplication.processEvents()
        h.resize(width, h.heightForWidth(width))
        QtWidgets.QApplication.processEvents()
        tip = h.efficiency.toolTip()
        assert "Why below the ceiling:" in tip and "6,300 of 10,500 MHz" in tip and "65% of the gap" in tip
        assert h.prompt.whole().endswith("first token 9 ms · next ~2.3 s"), (width, h.prompt.whole())
        assert not h.prompt.elided, width
        assert "Predicted time to first token of the next turn" in h.prompt.toolTip()
        assert "11.5K tokens to read" in h.prompt.toolTip()
        assert h.context.whole() == "context 11.2K of 32.8K tokens" and not h.context.elided and not h.kv.elided
        for other in (h.context, h.kv, h.headline, h.efficiency, h.speed):
            assert not h.prompt.geometry().intersects(other.geometry()), (width, other.whole())
        h.close()
        h.deleteLater()
    # no reply measured yet: the wait alone, in whole words
    h = HeaderPanel()
    h.resize(1240, 120)
    h.show()
    h.update_snapshot(decided(dataclasses.replace(s, latency=None)))
    QtWidgets.QApplication.processEvents()
    assert h.prompt.whole() == "next reply's first token in ~2.3 s"
    h.close()
    h.deleteLater()
