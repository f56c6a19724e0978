"""The small rich text the dashboard's labels speak, read into styled runs and measured with font metrics.

A QLabel with rich text parses its HTML into a text document and lays it out on every ``setText``, then paints it
through that document: about four times what drawing a few runs of text costs. The value labels change every
poll, so they draw their text themselves from runs: ``<b>``, ``<i>``, ``<code>`` and ``<span>`` (or any of these
with ``style='color:…; background-color:…; font-size:…pt; font-weight:…'``), entities, ``<br>``. A text without a
tag is plain, as ``Qt::mightBeRichText`` decides it: its spaces and ampersands stay as written.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

from PySide6 import QtCore, QtGui

ELLIPSIS = "…"
_TAG = re.compile(r"<\s*(/?)\s*([a-zA-Z][a-zA-Z0-9]*)([^>]*)>")
_STYLE_ITEM = re.compile(r"([a-z-]+)\s*:\s*([^;'\"]+)")
_SPACES = re.compile(r"[ \t\r\n]+")
KNOWN_TAGS = frozenset({"b", "strong", "i", "em", "code", "tt", "span", "br", "font", "u", "small", "big", "p", "div"})
BOLD_TAGS = frozenset({"b", "strong"})
ITALIC_TAGS = frozenset({"i", "em"})
MONO_TAGS = frozenset({"code", "tt"})


@dataclass(frozen=True)
class Style:
    """How a run is drawn; ``None`` fields take the label's own (font, palette)."""

    bold: bool = False
    italic: bool = False
    mono: bool = False
    point_size: float | None = None
    color: str | None = None
    background: str | None = None


@dataclass(frozen=True)
class Run:
    text: str
    style: Style


PLAIN = Style()


def is_rich(text: str) -> bool:
    """True when ``text`` holds a tag a rich-text label knows, or an escaped '<' (else it is shown as written)."""
    if "&lt;" in text:
        return True
    if "<" not in text:
        return False
    return any(m.group(2).lower() in KNOWN_TAGS for m in _TAG.finditer(text))


def _styled(style: Style, tag: str, attrs: str) -> Style:
    """``style`` inside ``<tag attrs>``."""
    bold, italic = style.bold or tag in BOLD_TAGS, style.italic or tag in ITALIC_TAGS
    mono = style.mono or tag in MONO_TAGS
    size, color, background = style.point_size, style.color, style.background
    if "style" in attrs:
        for name, value in _STYLE_ITEM.findall(attrs):
            value = value.strip()
            if name == "color":
                color = value
            elif name == "background-color":
                background = value
            elif name == "font-weight":
                bold = value == "bold" or (value.isdigit() and int(value) >= 600)
            elif name == "font-size" and value.endswith("pt"):
                try:
                    size = float(value[:-2])
                except ValueError:
                    pass
    return Style(bold, italic, mono, size, color, background)


def parse(text: str) -> tuple[tuple[Run, ...], ...]:
    """The lines of ``text`` as runs; a plain text is one line of one run per line break it holds."""
    if not is_rich(text):
        return tuple((Run(line, PLAIN),) if line else () for line in text.split("\n"))
    lines: list[list[Run]] = [[]]
    stack: list[tuple[str, Style]] = []
    style = PLAIN
    pos = 0

    def add(chunk: str) -> None:
        chunk = html.unescape(_SPACES.sub(" ", chunk))
        if not chunk:
            return
        line = lines[-1]
        if chunk.startswith(" ") and (not line or line[-1].text.endswith(" ")):
            chunk = chunk[1:]  # rich text drops a line's leading space and collapses spaces across tags
            if not chunk:
                return
        if line and line[-1].style == style:
            line[-1] = Run(line[-1].text + chunk, style)
        else:
            line.append(Run(chunk, style))

    for m in _TAG.finditer(text):
        add(text[pos:m.start()])
        pos = m.end()
        closing, tag, attrs = m.group(1), m.group(2).lower(), m.group(3)
        if tag == "br":
            lines.append([])
        elif tag not in KNOWN_TAGS:
            continue
        elif closing:
            while stack:  # close up to the innermost tag of that name (a stray close closes nothing)
                if any(t == tag for t, _s in stack):
                    t, style = stack.pop()
                    if t == tag:
                        break
                else:
                    break
            style = stack[-1][1] if stack else PLAIN
        elif not attrs.rstrip().endswith("/"):
            style = _styled(style, tag, attrs)
            stack.append((tag, style))
    add(text[pos:])
    return tuple(tuple(_rstrip(line)) for line in lines)


def _rstrip(line: list[Run]) -> list[Run]:
    if line and line[-1].text.endswith(" "):
        line[-1] = Run(line[-1].text.rstrip(" "), line[-1].style)
        if not line[-1].text:
            line.pop()
    return line


def plain_text(lines: tuple[tuple[Run, ...], ...]) -> str:
    """What the runs read as, lines joined by newlines."""
    return "\n".join("".join(r.text for r in line) for line in lines)


class Fonts:
    """The fonts and metrics of a label's styles, made once per style and dropped when the label's font changes."""

    def __init__(self, base: QtGui.QFont) -> None:
        self.base = base
        self._cache: dict[tuple[bool, bool, bool, float | None], tuple[QtGui.QFont, QtGui.QFontMetricsF]] = {}
        self._widths: dict[Run, float] = {}  # the words around a number come back every poll: measured once

    def get(self, style: Style) -> tuple[QtGui.QFont, QtGui.QFontMetricsF]:
        key = (style.bold, style.italic, style.mono, style.point_size)
        hit = self._cache.get(key)
        if hit is None:
            f = QtGui.QFont(self.base)
            if style.mono:
                f.setFamilies(["monospace"])
                f.setStyleHint(QtGui.QFont.StyleHint.Monospace)
            if style.bold:
                f.setBold(True)
            if style.italic:
                f.setItalic(True)
            if style.point_size is not None and style.point_size > 0:
                f.setPointSizeF(style.point_size)
            hit = self._cache[key] = (f, QtGui.QFontMetricsF(f))
        return hit

    def width(self, run: Run) -> float:
        w = self._widths.get(run)
        if w is None:
            if len(self._widths) >= 512:
                self._widths.clear()
            w = self._widths[run] = self.get(run.style)[1].horizontalAdvance(run.text)
        return w


@dataclass(frozen=True)
class Laid:
    """Lines of runs measured: each line's runs with their widths, the widest line, and each line's ascent/height."""

    lines: tuple[tuple[tuple[Run, float], ...], ...]
    width: float
    line_metrics: tuple[tuple[float, float], ...]  # (ascent, height) per line

    @property
    def height(self) -> float:
        return sum(h for _a, h in self.line_metrics)


def lay_out(lines: tuple[tuple[Run, ...], ...], fonts: Fonts) -> Laid:
    """Measure every run; a line's height is its tallest font's (an empty line the label's own)."""
    out, metrics, widest = [], [], 0.0
    base_fm = fonts.get(PLAIN)[1]
    for line in lines:
        measured = tuple((r, fonts.width(r)) for r in line)
        widest = max(widest, sum(w for _r, w in measured))
        fms = [fonts.get(r.style)[1] for r in line] or [base_fm]
        metrics.append((max(fm.ascent() for fm in fms), max(fm.height() for fm in fms)))
        out.append(measured)
    return Laid(tuple(out), widest, tuple(metrics))


def elide(laid: Laid, fonts: Fonts, width: float) -> Laid | None:
    """The runs cut to ``width`` with an ellipsis in the style where the cut falls; ``None`` when all fits.

    Each line is cut on its own; within the run that overflows, the longest prefix that fits with the ellipsis is
    found by bisection on that run's font metrics (a few measurements, no layout of the whole text).
    """
    if laid.width <= width:
        return None
    lines = []
    for line in laid.lines:
        total = sum(w for _r, w in line)
        if total <= width:
            lines.append(line)
            continue
        kept: list[tuple[Run, float]] = []
        x = 0.0
        for run, w in line:
            fm = fonts.get(run.style)[1]
            ell = fm.horizontalAdvance(ELLIPSIS)
            if x + w + ell <= width:
                kept.append((run, w))
                x += w
                continue
            lo, hi = 0, len(run.text)
            while lo < hi:  # the most characters of this run that fit with the ellipsis
                mid = (lo + hi + 1) // 2
                if x + fm.horizontalAdvance(run.text[:mid].rstrip()) + ell <= width:
                    lo = mid
                else:
                    hi = mid - 1
            cut = run.text[:lo].rstrip()
            if not cut and kept:  # the ellipsis goes after the last run that fitted
                last, _w = kept[-1]
                text = last.text.rstrip() + ELLIPSIS
                kept[-1] = (Run(text, last.style), fonts.width(Run(text, last.style)))
            else:
                text = cut + ELLIPSIS
                kept.append((Run(text, run.style), fonts.width(Run(text, run.style))))
            break
        lines.append(tuple(kept))
    return Laid(tuple(lines), max((sum(w for _r, w in ln) for ln in lines), default=0.0), laid.line_metrics)


def paint(p: QtGui.QPainter, laid: Laid, fonts: Fonts, rect: QtCore.QRect, align: QtCore.Qt.AlignmentFlag,
          foreground: QtGui.QColor) -> None:
    """Draw the lines in ``rect`` (centred vertically unless aligned to the top), each run in its style."""
    if align & QtCore.Qt.AlignmentFlag.AlignTop:
        y = float(rect.top())
    else:
        y = rect.top() + (rect.height() - laid.height) / 2.0
    for line, (ascent, height) in zip(laid.lines, laid.line_metrics, strict=True):
        line_w = sum(w for _r, w in line)
        if align & QtCore.Qt.AlignmentFlag.AlignRight:
            x = rect.right() + 1 - line_w
        elif align & QtCore.Qt.AlignmentFlag.AlignHCenter:
            x = rect.left() + (rect.width() - line_w) / 2.0
        else:
            x = float(rect.left())
        for run, w in line:
            font, _fm = fonts.get(run.style)
            st = run.style
            if st.background:
                p.fillRect(QtCore.QRectF(x, y, w, height), QtGui.QColor(st.background))
            p.setFont(font)
            p.setPen(QtGui.QColor(st.color) if st.color else foreground)
            p.drawText(QtCore.QPointF(x, y + ascent), run.text)
            x += w
        y += height
