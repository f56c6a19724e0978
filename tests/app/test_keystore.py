"""A remembered API key lives in the platform keychain (through ``keyring``); the settings file gets it only when
there is no keychain and the user agreed, and then it is readable by the user alone (mode 0600).
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("PySide6")
from memory_keyring import MemoryKeyring, using_keyring

from kvmon.app.keystore import KeychainUnavailable

KEY = "remembered-key-0451"


@pytest.fixture
def memory() -> Iterator[MemoryKeyring]:
    backend = MemoryKeyring()
    with using_keyring(backend):
        yield backend


def _settings(path: Path):
    from kvmon.gui.settings import Settings

    return Settings(str(path))


def _file_text(path: Path) -> str:
    return path.read_text(encoding="utf-8") if path.exists() else ""


def test_a_remembered_key_goes_to_the_keychain_not_the_file(tmp_path: Path, memory: MemoryKeyring) -> None:
    ini = tmp_path / "kvmon.ini"
    s = _settings(ini)
    assert s.set_api_key(KEY, remember=True) == "keychain"
    s.sync()
    assert KEY not in _file_text(ini)
    assert KEY in memory.passwords.values()
    again = _settings(ini)  # a later start of the app
    assert again.api_key == KEY


def test_forgetting_the_key_removes_it_from_the_keychain(tmp_path: Path, memory: MemoryKeyring) -> None:
    s = _settings(tmp_path / "kvmon.ini")
    s.set_api_key(KEY, remember=True)
    assert s.set_api_key(KEY, remember=False) == "session"
    assert memory.passwords == {}
    assert _settings(tmp_path / "kvmon.ini").api_key is None


def test_without_a_keychain_the_key_is_not_stored_unless_the_user_agrees(tmp_path: Path, headless: None) -> None:
    ini = tmp_path / "kvmon.ini"
    s = _settings(ini)
    with pytest.raises(KeychainUnavailable):
        s.set_api_key(KEY, remember=True)
    s.sync()
    assert KEY not in _file_text(ini)
    assert s.api_key == KEY  # still used for this session
    assert _settings(ini).api_key is None


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file modes")
def test_the_agreed_plain_text_fallback_is_readable_by_the_user_only(tmp_path: Path, headless: None) -> None:
    ini = tmp_path / "kvmon.ini"
    s = _settings(ini)
    assert s.set_api_key(KEY, remember=True, allow_plain_text=True) == "settings file"
    s.sync()
    assert KEY in _file_text(ini)
    assert stat.S_IMODE(os.stat(ini).st_mode) == 0o600
    assert _settings(ini).api_key == KEY


def test_an_old_plain_text_key_moves_into_the_keychain(tmp_path: Path, memory: MemoryKeyring) -> None:
    ini = tmp_path / "kvmon.ini"
    ini.write_text(f"[connection]\nremember_key=true\napi_key={KEY}\n", encoding="utf-8")
    s = _settings(ini)
    assert s.api_key == KEY
    s.sync()
    assert KEY not in _file_text(ini) and KEY in memory.passwords.values()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file modes")
def test_an_old_key_file_others_can_read_is_made_the_users_alone_when_read_and_the_user_is_told(
        tmp_path: Path, headless: None) -> None:
    """A key an older kvmon wrote in a file with the umask's 0644, and no keychain to move it to: kept in the file
    (the user agreed back then), but readable by the user alone from the first read on, and said so once."""
    ini = tmp_path / "kvmon.ini"
    ini.write_text(f"[connection]\nremember_key=true\napi_key={KEY}\n", encoding="utf-8")
    os.chmod(ini, 0o644)
    s = _settings(ini)
    assert stat.S_IMODE(os.stat(ini).st_mode) == 0o600
    assert len(s.notices) == 1 and "0644" in s.notices[0] and "0600" in s.notices[0] and str(ini) in s.notices[0]
    assert KEY not in s.notices[0]
    assert s.api_key == KEY
    assert len(s.notices) == 1  # told once
    assert _settings(ini).notices == []  # and not again on the next start


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file modes")
def test_a_key_file_widened_later_is_fixed_when_kvmon_writes_it_again(tmp_path: Path, headless: None) -> None:
    """Qt keeps a file's mode when it rewrites it: a file that became 0644 would stay so with the key in it."""
    ini = tmp_path / "kvmon.ini"
    s = _settings(ini)
    s.set_api_key(KEY, remember=True, allow_plain_text=True)
    os.chmod(ini, 0o644)  # a backup restored, a careless chmod
    s.interval_s = 2.0
    s.sync()
    assert stat.S_IMODE(os.stat(ini).st_mode) == 0o600
    assert KEY in _file_text(ini) and any("0644" in n for n in s.notices)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file modes")
def test_a_settings_file_without_a_key_is_left_as_it_is(tmp_path: Path, headless: None) -> None:
    ini = tmp_path / "kvmon.ini"
    ini.write_text("[poll]\ninterval_s=2\n", encoding="utf-8")
    os.chmod(ini, 0o644)
    s = _settings(ini)
    s.sync()
    assert stat.S_IMODE(os.stat(ini).st_mode) == 0o644 and s.notices == []
