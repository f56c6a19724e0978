"""The labels' own rich-text runs read, measure, elide and paint as Qt's rich text does for the dashboard's texts."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6 import QtGui, QtWidgets

from kvmon.gui import runs
from kvmon.gui.labels import ValueLabel, plain_text

# texts of the kinds the header, status bar, model row and captioned lines set
TEXTS = [
    "context <b>1.20K</b> of 32.8K tokens · 4 slots",
    "KV <b>6.55 GiB</b> in use of 8.00 GiB (q8_0/q8_0)",
    "<b>llama-server</b> b11549",
    "tiny-llama <span style='color:#7f7f7f'>llama · 1M · all F32</span>",
    "<b style='color:#1f77b4'>38.2 tok/s</b> <span style='color:#d62728'>of 61.0 ceiling</span>",
    "63% <span style='font-size:8pt'>of ceiling</span>",
    "<span style='color:#2ca02c'>●</span> connected · http://127.0.0.1:9931",
    "recording <span style='color:#d62728'>●</span>",
    "first token 0.21 s (p95 0.25 s) · 0.3 ms/token (p95 0.5 ms) · 7 replies",
    "a &amp; b &lt;c&gt; &nbsp;d",
    "plain text with  two spaces & an ampersand < 3",
    "run <code style='background-color:#eeeeee'>&nbsp;-ctk q8_0&nbsp;</code> here",
    "two<br>lines",
]


def qt_plain(text: str) -> str:
    """What Qt's rich-text engine reads the text as (a plain text as written)."""
    if not QtGui.Qt.mightBeRichText(text):
        return text
    doc = QtGui.QTextDocument()
    doc.setHtml(text)
    return doc.toPlainText().replace("\u2028", "\n").replace("\u2029", "\n")


@pytest.mark.parametrize("text", TEXTS)
def test_runs_read_as_qt_reads_the_text(qapp, text: str) -> None:
    assert plain_text(text).replace("\xa0", " ") == qt_plain(text)
    assert runs.is_rich(text) == QtGui.Qt.mightBeRichText(text)


def test_styles_nest_and_close() -> None:
    (line,) = runs.parse("a <b>b <span style='color:#ff0000; font-size:8pt'>c</span> d</b> e")
    assert [(r.text, r.style.bold, r.style.color, r.style.point_size) for r in line] == [
        ("a ", False, None, None), ("b ", True, None, None), ("c", True, "#ff0000", 8.0), (" d", True, None, None),
        (" e", False, None, None)]


def test_a_stray_or_unknown_tag_costs_no_text() -> None:
    assert plain_text("x </b> y <blink>z</blink>") == "x y z"
    assert plain_text("<b>open") == "open"


@pytest.mark.parametrize("text", [t for t in TEXTS if "<br>" not in t])
def test_a_label_asks_for_the_width_a_qlabel_would(qtbot, text: str) -> None:
    label = ValueLabel(text)
    ref = QtWidgets.QLabel(text)
    qtbot.addWidget(label)
    qtbot.addWidget(ref)
    assert abs(label.text_width() - ref.sizeHint().width()) <= 2
    assert label.sizeHint().width() >= ref.sizeHint().width() - 1  # never less room than Qt would take


def test_elision_fits_any_width_and_keeps_the_style_where_it_cuts(qapp) -> None:
    fonts = runs.Fonts(QtGui.QFont())
    laid = runs.lay_out(runs.parse("context <b>123,456</b> of 1.05M tokens"), fonts)
    for width in range(4, int(laid.width) + 1, 3):
        cut = runs.elide(laid, fonts, width)
        assert cut is not None
        assert cut.width <= width or "".join(r.text for r, _w in cut.lines[0]) == runs.ELLIPSIS
        assert "".join(r.text for r, _w in cut.lines[0]).endswith(runs.ELLIPSIS)
    assert runs.elide(laid, fonts, laid.width + 1) is None
    mid = runs.elide(laid, fonts, fonts.width(runs.Run("context 123", runs.PLAIN)) + 20)
    assert mid is not None and mid.lines[0][-1][0].style.bold  # cut inside the bold number: '…' in bold


def test_the_label_paints_its_runs_in_their_colours(qtbot) -> None:
    label = ValueLabel("<span style='color:#ff0000'>■■■■</span> and <b>text</b>")
    qtbot.addWidget(label)
    label.resize(label.sizeHint())
    img = label.grab().toImage()
    reds = sum(1 for x in range(img.width()) for y in range(img.height())
               if QtGui.QColor(img.pixel(x, y)).red() > 200 and QtGui.QColor(img.pixel(x, y)).green() < 60)
    assert reds > 20
    label.set("<span style='color:#0000ff'>■■■■</span> and <b>text</b>")
    img = label.grab().toImage()
    reds = sum(1 for x in range(img.width()) for y in range(img.height())
               if QtGui.QColor(img.pixel(x, y)).red() > 200 and QtGui.QColor(img.pixel(x, y)).green() < 60)
    assert reds == 0


def test_right_click_copies_the_whole_text(qtbot) -> None:
    label = ValueLabel("context <b>1.20K</b> of 32.8K tokens")
    qtbot.addWidget(label)
    label.show()
    label.set_elide(True)
    label.resize(60, label.sizeHint().height())
    assert label.elided
    (copy,) = label.actions()
    copy.trigger()
    assert QtWidgets.QApplication.clipboard().text() == "context 1.20K of 32.8K tokens"


def test_a_style_sheet_font_size_gives_the_text_more_room(qtbot) -> None:
    label = ValueLabel("38.2 tok/s")
    qtbot.addWidget(label)
    small = label.sizeHint()
    label.setStyleSheet("font-size: 24pt;")
    label.ensurePolished()
    assert label.sizeHint().width() > small.width() * 1.5 and label.sizeHint().height() > small.height()
