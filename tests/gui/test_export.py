"""Exports: window/panel PNG with caption (decodes, right size, not blank), plot SVG (parses, has the plotted
paths), plot CSV (round-trips to the plotted values), clipboard, file names, and no credentials anywhere."""

from __future__ import annotations

import csv
import dataclasses
import math
import re
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from PySide6 import QtGui, QtWidgets
from synthetic import SyntheticMonitor

from kvmon.gui import caption, export, fmt
from kvmon.gui.main_window import MainWindow
from kvmon.gui.settings import Settings

SECRET = "hunter2-s3cret-KEY"
BAD_URL = f"http://alice:{SECRET}@127.0.0.1:8080/v1?api_key={SECRET}"


def _read_plot_csv(path: Path) -> dict[str, tuple[list[float], list[float]]]:
    """The CSV export read back: series → (x, y), NaN for an empty cell."""
    out: dict[str, tuple[list[float], list[float]]] = {}
    with open(path, newline="", encoding="utf-8") as fh:
        rows = csv.reader(fh)
        next(rows, None)
        for name, x, y in rows:
            xs, ys = out.setdefault(name, ([], []))
            xs.append(float(x) if x else math.nan)
            ys.append(float(y) if y else math.nan)
    return out


def _snaps(n: int = 40, url: str | None = None) -> list:
    mon = SyntheticMonitor(t0_wall=1_764_000_000.0)
    out = [mon.poll() for _ in range(n)]
    if url is not None:
        out = [dataclasses.replace(s, url=url) for s in out]
    return out


@pytest.fixture
def win(qtbot, tmp_path: Path) -> MainWindow:
    w = MainWindow(Settings(str(tmp_path / "s.ini")), tray=False)
    qtbot.addWidget(w)
    w.resize(1280, 800)
    w.show()
    qtbot.waitExposed(w)
    w.load(_snaps())
    return w


def _not_blank(img: QtGui.QImage) -> int:
    """Number of distinct colours in a coarse sample of the image."""
    small = img.convertToFormat(QtGui.QImage.Format.Format_RGB32).scaled(160, 100)
    ptr = small.constBits()
    arr = np.frombuffer(ptr, dtype=np.uint32, count=small.width() * small.height())
    return len(np.unique(arr))


def test_window_png_decodes_has_caption_strip_and_is_not_blank(win: MainWindow, tmp_path: Path) -> None:
    """The window as a picture is its dashboard with the caption below: no menu bar, toolbar or status bar."""
    out = tmp_path / "w.png"
    saved = win.exports.save_png(None, str(out))
    assert saved == str(out)
    img = QtGui.QImage(str(out))
    assert not img.isNull()
    dpr = win.devicePixelRatioF()
    dash = win.centralWidget()
    assert img.width() == round(win.width() * dpr) == round(dash.width() * dpr)
    assert img.height() > round(dash.height() * dpr)  # the caption strip below the dashboard
    assert img.height() - round(dash.height() * dpr) < 80 * dpr
    chrome = win.menuBar().height() + win.toolbar.height() + win.statusBar().height()
    assert img.height() < round((win.height() - chrome) * dpr) + 80 * dpr
    top = dash.grab().toImage().copy(0, 0, img.width(), 40).convertToFormat(QtGui.QImage.Format.Format_RGB32)
    assert img.copy(0, 0, img.width(), 40).convertToFormat(QtGui.QImage.Format.Format_RGB32) == top  # it starts there
    assert _not_blank(img) > 20
    copied = win.exports.copy()
    assert copied.size() == img.size()  # "Copy window image" is the same picture


@pytest.mark.parametrize("panel", ["header", "speed-vs-context", "speed-over-time", "memory", "alerts"])
def test_panel_png_has_the_panel_size(win: MainWindow, tmp_path: Path, panel: str) -> None:
    out = tmp_path / f"{panel}.png"
    img = export.save_png(export.panel_widget(win, panel), out, win.last, with_caption=False)
    back = QtGui.QImage(str(out))
    w = export.panel_widget(win, panel)
    assert back.size() == img.size()
    assert back.width() == round(w.width() * win.devicePixelRatioF())
    assert back.height() == round(w.height() * win.devicePixelRatioF())
    assert _not_blank(back) > 3


def test_unknown_panel_is_a_typed_failure(win: MainWindow) -> None:
    with pytest.raises(export.ExportError, match="unknown panel"):
        export.panel_widget(win, "nope")


def test_unwritable_png_path_reports_instead_of_raising(win: MainWindow, tmp_path: Path) -> None:
    assert win.exports.save_png(None, str(tmp_path / "missing-dir" / "x.png")) is None
    assert "Export failed" in win.statusBar().currentMessage()


@pytest.mark.parametrize("engine", ["pyqtgraph", "qt"])
def test_svg_parses_with_plotted_paths_and_caption(win: MainWindow, tmp_path: Path, engine: str) -> None:
    out = tmp_path / f"p-{engine}.svg"
    cached = QtWidgets.QGraphicsItem.CacheMode.DeviceCoordinateCache
    assert win.speed_context.measured.cacheMode() == cached
    export.save_plot_svg(win.speed_context, out, win.last, engine=engine)
    assert win.speed_context.measured.cacheMode() == cached  # drawn as paths for the SVG, cached again after
    root = ET.parse(out).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    paths = [e for e in root.iter() if e.tag in (f"{ns}path", f"{ns}polyline")]
    assert len(paths) >= 3  # ceiling, forecast, points at least
    # the ceiling curve is drawn as one long path: many coordinates in one element
    longest = max(len(re.findall(r"[-\d.]+", (e.get("d") or e.get("points") or ""))) for e in paths)
    assert longest >= 2 * len(win.last.ceiling_curve)
    texts = " ".join(t.text or "" for t in root.iter(f"{ns}text"))
    assert "kvmon" in texts and "Meta-Llama-3.1-8B-Instruct" in texts
    assert root.find(f"{ns}desc") is not None


def test_svg_of_speed_over_time(win: MainWindow, tmp_path: Path) -> None:
    """The chart as on screen: decode and ceiling, the prefill lane with the time axis under it, the legend."""
    text = export.save_plot_svg(win.speed_time, tmp_path / "t.svg", win.last)
    root = ET.fromstring(text)
    assert "<path" in text or "<polyline" in text
    texts = " ".join("".join(t.itertext()) for t in root.iter("{http://www.w3.org/2000/svg}text"))
    assert "decode" in texts and "ceiling" in texts and "prefill" in texts, texts[:300]


def _pixels(img: QtGui.QImage) -> np.ndarray:
    img = img.convertToFormat(QtGui.QImage.Format.Format_RGB32)
    rows = np.frombuffer(img.constBits(), np.uint8).reshape(img.height(), img.bytesPerLine())
    return rows[:, : img.width() * 4].astype(int)


def test_svg_of_speed_over_time_draws_back_as_on_screen(win: MainWindow, tmp_path: Path) -> None:
    """Drawn back, the SVG is the view on screen (chart, lane, time axis, legend in their places): pyqtgraph's
    exporter would put the lane's box and a dark block where they are not."""
    from PySide6 import QtCore, QtSvg

    view = win.speed_time.plot
    text = export.save_plot_svg(win.speed_time, tmp_path / "t.svg", win.last)
    with export._no_item_caches(view):
        on_screen = _pixels(view.grab().toImage())
    renderer = QtSvg.QSvgRenderer(QtCore.QByteArray(text.encode("utf-8")))
    box = renderer.viewBoxF()
    img = QtGui.QImage(int(box.width()), int(box.height()), QtGui.QImage.Format.Format_RGB32)
    img.fill(QtGui.QColor("black"))
    p = QtGui.QPainter(img)
    renderer.render(p)
    p.end()
    drawn = _pixels(img)[: on_screen.shape[0], : on_screen.shape[1]]
    assert drawn.shape == on_screen.shape  # the caption adds a line below, nothing else
    assert float(np.abs(drawn - on_screen).mean()) < 6.0


@pytest.mark.parametrize("panel", ["speed-vs-context", "speed-over-time"])
def test_csv_round_trips_to_the_plotted_values(win: MainWindow, tmp_path: Path, panel: str) -> None:
    p = export.panel_widget(win, panel)
    out = tmp_path / "d.csv"
    n = export.save_plot_csv(p, out)
    back = _read_plot_csv(out)
    series = export.plotted_series(p)
    assert n == sum(len(x) for _name, x, _y in series) and n > 0
    for name, x, y in series:
        if len(x) == 0:
            continue
        bx, by = back[name]
        np.testing.assert_array_equal(np.asarray(bx), x)  # exact: floats are written with repr
        np.testing.assert_array_equal(np.asarray(by), y)
    header = out.read_text().splitlines()[0]
    assert "tok/s" in header


def test_csv_names_each_series(win: MainWindow) -> None:
    names = [n for n, _x, _y in export.plotted_series(win.speed_context)]
    assert "ceiling (memory bus)" in names and "measured" in names
    names_t = [n for n, _x, _y in export.plotted_series(win.speed_time)]
    assert {"decode", "ceiling", "prefill"} <= set(names_t)


def test_copy_to_clipboard(win: MainWindow) -> None:
    img = win.exports.copy("header")
    got = QtGui.QGuiApplication.clipboard().image()
    assert not got.isNull() and got.size() == img.size()


def test_menu_and_shortcuts_exist(win: MainWindow) -> None:
    acts = win.exports.actions
    assert acts["png"].shortcut().toString() == "Ctrl+S"
    assert acts["copy"].shortcut().toString() == "Ctrl+Shift+C"
    assert acts["svg:speed-vs-context"].shortcut().toString() == "Ctrl+Shift+S"
    assert {"csv:speed-over-time", "png:memory", "record", "report"} <= set(acts)
    bars = win.findChildren(QtWidgets.QToolBar)
    assert any(acts["png"] in b.actions() for b in bars)


def test_menu_action_asks_for_a_name_with_model_and_time(win: MainWindow, tmp_path: Path) -> None:
    asked: list[str] = []

    def ask(_w, _title, suggested, _filt):
        asked.append(suggested)
        return str(tmp_path / suggested)

    win.exports.ask = ask
    win.exports.actions["csv:speed-vs-context"].trigger()
    assert len(asked) == 1 and (tmp_path / asked[0]).exists()
    assert re.fullmatch(r"kvmon-Meta-Llama-3\.1-8B-Instruct-speed-vs-context-\d{8}-\d{6}\.csv", asked[0])


@pytest.mark.parametrize("name, want", [
    ("Qwen3.5-27B-Q4_K_M.gguf", "kvmon-Qwen3.5-27B-Q4_K_M-"),
    ("../../etc/passwd", "kvmon-etc-passwd-"),
    ("llama3:8b / instruct", "kvmon-llama3-8b-instruct-"),
    (None, "kvmon-no-model-"),
])
def test_default_filename_is_sanitized(name: str | None, want: str) -> None:
    s = _snaps(1)[0]
    s = dataclasses.replace(s, model=dataclasses.replace(s.model, name=name))
    got = caption.default_filename(s, "png", now_wall=1_764_000_000.0 + 12 * 3600)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(1_764_000_000.0 + 12 * 3600))
    assert got == f"{want}{stamp}.png"
    assert "/" not in got and re.fullmatch(r"[A-Za-z0-9._-]+", got)


@pytest.mark.parametrize("text", [
    BAD_URL, f"Authorization: Bearer {SECRET}", f"api_key={SECRET}", f"token {SECRET}",
    f"see https://bob:{SECRET}@example.org/x", f"http://h/?k={SECRET}",
])
def test_scrub_removes_credentials(text: str) -> None:
    assert SECRET not in caption.scrub(text)


def test_scrub_keeps_plain_urls() -> None:
    assert caption.scrub("at http://127.0.0.1:8080/v1 now") == "at http://127.0.0.1:8080/v1 now"


@pytest.mark.parametrize("text", ["first token 0.78 s (p95 3.13 s) · 17.8 ms/token (p95 18.0 ms) · 2 replies",
                                  "10.8 J/token · 334 tokens/Wh", "per token 12 ms", "the secret sauce"])
def test_scrub_keeps_figures_beside_the_word_token(text: str) -> None:
    assert caption.scrub(text) == text


def test_no_credentials_in_any_export(qtbot, tmp_path: Path) -> None:
    w = MainWindow(Settings(str(tmp_path / "s.ini")), tray=False)
    qtbot.addWidget(w)
    w.resize(1280, 800)
    w.show()
    snaps = _snaps(20, url=BAD_URL)
    w.load(snaps)
    assert SECRET not in caption.caption_text(w.last)
    svg = export.plot_svg_text(w.speed_context, w.last)
    assert SECRET not in svg
    assert SECRET not in export.plot_csv_text(w.speed_time)
    # the image is made of the window's texts plus the caption: none may carry the secret
    seen: list[str] = []
    real_grab = QtWidgets.QWidget.grab

    def spy(self, *a):  # what every label says at the moment the picture is taken
        seen.extend(lbl.text() for lbl in self.findChildren(QtWidgets.QLabel))
        return real_grab(self, *a)

    w.set_banner(f"watching {BAD_URL}")  # a label of the dashboard that carries the address
    QtWidgets.QWidget.grab = spy  # type: ignore[method-assign]
    try:
        w.exports.save_png(None, str(tmp_path / "x.png"))
    finally:
        QtWidgets.QWidget.grab = real_grab  # type: ignore[method-assign]
    assert seen and any("127.0.0.1:8080/v1" in t for t in seen)
    assert not [t for t in seen if SECRET in t]
    assert SECRET in w.header.banner.text()  # restored afterwards


def test_caption_wraps_to_the_image_width(qtbot) -> None:
    img = QtGui.QImage(300, 100, QtGui.QImage.Format.Format_ARGB32)
    img.fill(0)
    text = caption.caption_text(_snaps(1)[0])
    out = caption.with_caption(img, text)
    assert out.width() == 300 and out.height() > 100 + 3 * 12  # several lines at this width
    assert "kvmon 0" in text or "kvmon " in text
    assert not math.isnan(float(out.height()))



def test_a_caption_sentence_longer_than_the_image_breaks_between_words(qtbot) -> None:
    """The compact view's strip is narrower than a verdict's sentence: every line fits, and no word is lost."""
    font = QtGui.QFont()
    font.setPointSizeF(9.0)
    metrics = QtGui.QFontMetricsF(font)
    sentence = "Spilled: 2.83 GiB of the weights and 9.50 GiB of the KV cache in host RAM — capped at ~11 tok/s"
    text = f"{sentence} · Llama 3.1 8B Instruct (Q4_K - Medium) · kvmon 0.2.0"
    lines = caption._wrap(text, metrics, 200.0)
    assert all(metrics.horizontalAdvance(line) <= 200.0 for line in lines), lines
    assert " ".join(lines).replace(" · ", " ").split() == text.replace(" · ", " ").split()

def test_the_caption_has_the_numbers_the_header_shows_when_a_poll_arrives_during_the_grab(
        win: MainWindow, qtbot) -> None:
    from PySide6 import QtCore

    from kvmon.gui import fmt

    first = win.last
    assert first is not None and win.shown is first
    later = dataclasses.replace(first, seq=first.seq + 1, decode_tok_s=12.345, efficiency=0.2)
    QtCore.QTimer.singleShot(0, lambda: win.on_snapshot(later))  # delivered inside the grab's processEvents
    _img, text = export.captioned(win, lambda: export.shown_snapshot(win))
    assert win.shown is later
    h = fmt.hero(later)
    assert win.header.speed.whole() == h.number == "12.3 tok/s" and text is not None
    assert f"{h.number} {h.against}" in text and h.against.endswith(f"· {h.share}")
    assert h.against == win.header.efficiency.whole()


def test_a_loading_model_keeps_the_last_speed_and_says_it_loads(win: MainWindow) -> None:
    """While the model (re)loads the big number is the last speed measured, dimmed with its age, and the headline
    and the caption say that it loads (not "— of — ceiling" with "— of ceiling" beside it)."""
    from kvmon.core.snapshot import Activity, Connection, ConnectionStatus
    from kvmon.core.verdict import decided

    s = win.last
    assert s is not None and s.decode_tok_s is not None
    loading = decided(dataclasses.replace(s, decode_tok_s=None, efficiency=None, ceiling_tok_s=None,
                                          activity=Activity.LOADING, t_monotonic=s.t_monotonic + 5,
                                          connection=Connection(ConnectionStatus.LOADING, reason="loading model")))
    win.on_snapshot(loading)
    assert win.header.speed.whole() == fmt.tok_s(s.decode_tok_s)
    assert win.header.efficiency.whole() == "last reply, 5.0 s ago"
    assert win.header.headline.whole() == "Loading the model: its speed shows once it answers"
    text = caption.caption_text(loading)
    assert text.startswith("Loading the model: its speed shows once it answers · ")
    assert "— of —" not in text and "(—)" not in text
    assert f"· {fmt.tok_s(s.decode_tok_s)} last reply, 5.0 s ago ·" in text


def test_an_idle_server_reads_idle_in_the_caption_as_in_the_header(win: MainWindow) -> None:
    from kvmon.core.snapshot import Activity
    from kvmon.core.verdict import decided

    s = win.last
    assert s is not None
    idle = decided(dataclasses.replace(s, decode_tok_s=None, efficiency=None, activity=Activity.IDLE,
                                       reasons={**s.reasons, "decode_tok_s": "idle: no slot is generating"}))
    win.on_snapshot(idle)
    assert win.header.headline.whole().startswith("Idle at ") and "· ceiling " in win.header.efficiency.whole()
    text = caption.caption_text(idle)
    assert text.startswith(f"{win.header.headline.whole()} · ") and f"{win.header.efficiency.whole()} ·" in text


def test_idle_at_a_depth_nobody_reports_reads_idle_alone(win: MainWindow) -> None:
    """vLLM between requests: the pool holds nothing, so no depth and no ceiling "here": "idle", not "ceiling —"."""
    from kvmon.core.snapshot import Activity
    from kvmon.core.verdict import decided

    s = win.last
    assert s is not None
    idle = decided(dataclasses.replace(s, decode_tok_s=None, efficiency=None, ceiling_tok_s=None,
                                       context_tokens=None, activity=Activity.IDLE,
                                       reasons={**s.reasons, "decode_tok_s": "idle: no request"}))
    win.on_snapshot(idle)
    assert win.header.headline.whole() == "Idle: no conversation in context"
    assert "ceiling" not in win.header.efficiency.whole() and "ceiling —" not in caption.caption_text(idle)
