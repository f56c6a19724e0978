"""Help ▸ Keyboard shortcuts and About: each shortcut listed once under the words of its menu entry, and the About
text naming this version and every server kvmon reads."""

from __future__ import annotations

from typing import Any

from PySide6 import QtGui

from kvmon import __version__
from kvmon.gui.help import about_html, backends_text, shortcut_rows


def test_each_shortcut_once_in_the_menu_entrys_words(qtbot: Any) -> None:
    actions = []
    for text, keys in (("&Record…", "Ctrl+R"), ("Export &PNG…", "Ctrl+E"), ("Record again", "Ctrl+R"), ("Quit", "")):
        act = QtGui.QAction(text)
        act.setShortcut(QtGui.QKeySequence(keys))
        actions.append(act)
    rows = shortcut_rows(actions, extra=[("Ctrl+E", "taken already"), ("Space", "pause the replay")])
    texts = [what for _keys, what in rows]
    assert texts == ["Record", "Export PNG", "pause the replay"]


def test_about_names_this_version_and_every_server() -> None:
    text = about_html()
    assert f"kvmon {__version__}" in text
    assert backends_text() == "llama-server, llama-server router, llama-swap, Ollama, vLLM and LM Studio"
    assert "llama-swap, Ollama, vLLM and LM Studio" in text
