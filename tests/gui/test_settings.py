"""The settings dialog: it asks before it keeps an API key in plain text."""

from __future__ import annotations

from pathlib import Path

KEY = "remembered-key-0451"


def _settings(path: Path):
    from kvmon.gui.settings import Settings

    return Settings(str(path))


def _file_text(path: Path) -> str:
    return path.read_text(encoding="utf-8") if path.exists() else ""


def test_the_dialog_asks_before_plain_text(qtbot, tmp_path: Path, headless: None) -> None:
    from PySide6 import QtCore, QtWidgets

    from kvmon.gui.settings import SettingsDialog

    ini = tmp_path / "kvmon.ini"
    s = _settings(ini)
    dlg = SettingsDialog(s)
    qtbot.addWidget(dlg)
    dlg.api_key.setText(KEY)
    dlg.remember.setChecked(True)
    asked: list[str] = []

    def answer(button: QtWidgets.QMessageBox.StandardButton) -> None:
        box = QtWidgets.QApplication.activeModalWidget()
        assert isinstance(box, QtWidgets.QMessageBox)
        asked.append(box.text())
        box.button(button).click()

    QtCore.QTimer.singleShot(100, lambda: answer(QtWidgets.QMessageBox.StandardButton.No))
    dlg.apply()
    assert asked and "keychain" in asked[0].lower()
    assert KEY not in _file_text(ini)
    QtCore.QTimer.singleShot(100, lambda: answer(QtWidgets.QMessageBox.StandardButton.Yes))
    dlg.apply()
    assert KEY in _file_text(ini)
