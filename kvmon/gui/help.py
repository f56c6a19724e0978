"""Help ▸ Keyboard shortcuts, What the numbers mean, About: the texts and the one dialog that shows them.

The shortcut list is read from the window's own actions (and the replay's keys), so it cannot drift from them.
"""

from __future__ import annotations

import html
import platform
from collections.abc import Iterable

from PySide6 import QtCore, QtGui, QtWidgets

from kvmon import __version__
from kvmon.gui import theme


def _swatch(quantity: str, dashed: bool = False) -> str:
    c = theme.hex_color(quantity)
    if dashed:
        return f"<span style='color:{c}'><b>╌╌</b></span>"
    return f"<span style='color:{c}'>■</span>"


def numbers_html() -> str:
    """What each number and colour on the dashboard means, in the user's terms."""
    rows = [
        ("Decode speed", _swatch("decode"),
         "Tokens the server generates per second now, measured from its own counters (llama-server's /slots)."),
        ("Ceiling", _swatch("ceiling", dashed=True),
         "The fastest decode the memory bus allows at this context depth: every generated token reads the model's "
         "weights it uses plus the KV cache of every token in context. Bandwidth ÷ bytes read per token."),
        ("Efficiency", "",
         "Decode speed as a share of the ceiling. 60–80% is usual; a speed above the ceiling means one of the "
         "ceiling's inputs is wrong, and kvmon shows the ceiling as uncertain instead."),
        ("Forecast", _swatch("forecast"),
         "Where decode speed is heading as the conversation grows, fitted on this session (the band: 80% of "
         "outcomes). It starts again when the context size, cache type, slots or placement change."),
        ("Prefill speed", _swatch("prefill"),
         "Prompt tokens the server reads per second (needs llama-server's --metrics); 10–100× decode, so it has "
         "its own lane."),
        ("Context", "", "Tokens the deepest conversation holds now, of what one slot can hold (its context size)."),
        ("KV cache in use / allocated", f"{_swatch('kv_in_use')} {_swatch('kv_allocated')}",
         "In use: the cache of the tokens in context (read for every token: it decides speed). Allocated: what "
         "the server reserved at load for the whole context (it decides whether things fit)."),
        ("Weights", _swatch("weights"), "The model's tensors in this memory."),
        ("Draft model", _swatch("draft"),
         "Speculative decoding's draft model: its weights and its own KV cache (the model's context size, the "
         "draft's layers and cache types), reserved at load beside the model's."),
        ("Server's other memory", _swatch("server_other"),
         "Compute buffers and the driver's share of the server process."),
        ("Other programs", _swatch("other_processes"), "Memory other programs (a browser, a game) hold on the GPU."),
        ("Free", _swatch("free"), "Memory nobody holds."),
        ("Spill line", _swatch("spill"),
         "The end of VRAM: what grows past it goes to system RAM over PCIe, where decode runs several times "
         "slower."),
        ("Bandwidth", _swatch("bandwidth"),
         "Bytes read per second while decoding (decode speed × bytes per token) against the memory's peak; "
         "PCIe ↓/↑ is traffic between the GPU and system RAM (high while a model spills)."),
        ("Where numbers come from", "",
         "Measured (the server's counters, the GPU driver), computed by kvmon (from the model file's shape), from "
         "the server's command line or log (cache type, context size), from your settings, or from kvmon's GPU "
         "table. Hover a number: its tooltip says which, and why when it is unknown (—)."),
    ]
    body = "".join(f"<tr><td valign='top' style='padding-right:10px'><b>{html.escape(name)}</b> {sw}</td>"
                   f"<td>{html.escape(text)}</td></tr>" for name, sw, text in rows)
    return f"<h3>What the numbers mean</h3><table cellspacing='4'>{body}</table>"


def shortcut_rows(actions: Iterable[QtGui.QAction], extra: Iterable[tuple[str, str]] = ()) -> list[tuple[str, str]]:
    """(keys, what) for every action that has a shortcut, then ``extra``; each shortcut once."""
    own = [(act.shortcut().toString(QtGui.QKeySequence.SequenceFormat.NativeText),
            act.text().replace("&", "").rstrip("…").strip()) for act in actions]
    rows: dict[str, str] = {}
    for keys, what in (*own, *extra):
        if keys:
            rows.setdefault(keys, what)
    return list(rows.items())


def shortcuts_html(rows: Iterable[tuple[str, str]]) -> str:
    body = "".join(f"<tr><td style='padding-right:16px'><code>{html.escape(k)}</code></td><td>{html.escape(w)}</td>"
                   "</tr>" for k, w in rows)
    return f"<h3>Keyboard shortcuts</h3><table cellspacing='3'>{body}</table>"


def backends_text() -> str:
    """Every server kvmon reads, as people name them: "llama-server, llama-server router, llama-swap, Ollama, vLLM
    and LM Studio"."""
    from kvmon.app.detection import server_labels

    names = list(server_labels())
    return ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else "".join(names)


def about_html() -> str:
    """Version, what kvmon is, the Qt it runs on."""
    from PySide6 import __version__ as pyside_version

    return (f"<h3>kvmon {html.escape(__version__)}</h3>"
            "<p>Why is my local LLM getting slower — and how close am I to falling off the cliff? kvmon shows "
            "decode speed against the ceiling the memory bus allows at this context depth, the KV cache, memory "
            "headroom, and warns before the cache or the model spills out of VRAM.</p>"
            f"<p>For {html.escape(backends_text())}. MIT licence.</p>"
            f"<p style='color:{theme.hex_color('muted')}'>Qt {html.escape(QtCore.qVersion())} · PySide6 "
            f"{html.escape(pyside_version)} · Python {html.escape(platform.python_version())}</p>")


class HelpDialog(QtWidgets.QDialog):
    """A non-modal dialog with one page of rich text, sized to it (within the screen)."""

    TEXT_WIDTH = 620  # px: the widest a page's lines grow before they wrap

    def __init__(self, title: str, text: str, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(title)
        self._lay = QtWidgets.QVBoxLayout(self)
        self.browser = QtWidgets.QTextBrowser()
        self.browser.setOpenExternalLinks(True)
        self.browser.setHtml(text)
        self._lay.addWidget(self.browser)
        self._buttons = QtWidgets.QDialogButtonBox(QtWidgets.QDialogButtonBox.StandardButton.Close)
        self._buttons.rejected.connect(self.reject)
        self._lay.addWidget(self._buttons)
        self.resize(self.fitting_size())

    def fitting_size(self) -> QtCore.QSize:
        """As wide as the page's lines read well and as tall as the page, no larger than the screen's area."""
        doc = self.browser.document()
        doc.setTextWidth(self.TEXT_WIDTH)
        doc.setTextWidth(min(self.TEXT_WIDTH, doc.idealWidth()))
        frame = 2 * self.browser.frameWidth() + 4
        scroll = self.browser.verticalScrollBar().sizeHint().width()
        m = self._lay.contentsMargins()
        buttons = self._buttons.sizeHint().height() + self._lay.spacing()
        size = QtCore.QSize(round(doc.size().width()) + frame + scroll + m.left() + m.right(),
                            round(doc.size().height()) + frame + buttons + m.top() + m.bottom())
        screen = self.screen() or QtGui.QGuiApplication.primaryScreen()
        return size.boundedTo(screen.availableGeometry().size() * 0.9) if screen is not None else size
