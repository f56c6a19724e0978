"""A server's tab says its name as written: an ampersand in it is a character, not a keyboard shortcut."""

from __future__ import annotations

from kvmon.app.store import SessionStore
from kvmon.gui.server_tabs import ServerTabs, ServerView


def test_an_ampersand_in_a_server_name_is_shown(qtbot) -> None:
    views = {k: ServerView(k, label, SessionStore()) for k, label in (("a", "R&D box"), ("b", "lab"))}
    tabs = ServerTabs(views, "a")
    qtbot.addWidget(tabs)
    assert tabs.tabText(0) == "R&&D box"  # Qt draws "&&" as one "&" and makes no shortcut of it
    # a mnemonic would have made Alt+D a shortcut: none is there
    assert all("&" not in t.replace("&&", "") for t in (tabs.tabText(i) for i in range(tabs.count())))
