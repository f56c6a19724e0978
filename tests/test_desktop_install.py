"""``kvmon --install-desktop`` / ``--uninstall-desktop`` against a temporary XDG data folder: what is written (a valid
entry running this installation's kvmon by absolute path, the icon in every size), what is removed, and each way it
refuses (no freedesktop menus, a folder it cannot write, an entry it did not write) with nothing half done."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import kvmon
from kvmon import cli, resources
from kvmon.cli import desktop

ROOT = Path(__file__).resolve().parent.parent
ICON_SIZES = tuple(resources.icon_pngs())
VALIDATE = shutil.which("desktop-file-validate")


def _tree(base: Path) -> set[str]:
    return {p.relative_to(base).as_posix() for p in base.rglob("*") if p.is_file()} if base.exists() else set()


def _expected() -> set[str]:
    return {"applications/kvmon.desktop", "icons/hicolor/scalable/apps/kvmon.svg",
            *(f"icons/hicolor/{s}x{s}/apps/kvmon.png" for s in ICON_SIZES)}


def _validate(entry: Path) -> None:
    if VALIDATE is None:
        return
    out = subprocess.run([VALIDATE, str(entry)], capture_output=True, text=True)
    assert out.returncode == 0 and not out.stdout.strip(), out.stdout + out.stderr


@pytest.fixture
def xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A throw-away XDG data folder (and system data folders with no kvmon entry in them)."""
    data = tmp_path / "data"
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    monkeypatch.setenv("XDG_DATA_DIRS", str(tmp_path / "system"))
    monkeypatch.setattr(sys, "platform", "linux")
    return data


# --- what is written --------------------------------------------------------------------------------------


def test_install_writes_the_entry_and_every_icon(xdg: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert len(ICON_SIZES) >= 9 and 48 in ICON_SIZES
    assert cli.main(["--install-desktop"]) == 0
    out = capsys.readouterr().out
    assert _tree(xdg) == _expected()
    exe = desktop.entry_point()
    assert f"it runs {exe}" in out and "kvmon --uninstall-desktop" in out
    for path in _expected():
        assert str(xdg / path) in out, path  # says every file it wrote
        assert (xdg / path).stat().st_mode & 0o777 == 0o644
    for size, png in resources.icon_pngs().items():
        assert (xdg / f"icons/hicolor/{size}x{size}/apps/kvmon.png").read_bytes() == png.read_bytes()
    entry = (xdg / "applications" / "kvmon.desktop").read_text()
    assert f"\nExec={exe}\n" in entry and f"\nTryExec={exe}\n" in entry and f"\nExec={exe} --demo\n" in entry
    assert desktop.MARKER_LINE in entry.splitlines() and "\nIcon=kvmon\n" in entry
    assert not list(xdg.rglob(".*.tmp")), "no staging files left"
    _validate(xdg / "applications" / "kvmon.desktop")


def test_exec_is_this_installations_kvmon_command() -> None:
    """In the test environment (an editable install) the entry point is the venv's gui-script, which runs kvmon."""
    exe = desktop.entry_point()
    assert exe.is_absolute() and exe.name == "kvmon" and os.access(exe, os.X_OK)
    assert exe.parent == Path(sys.executable).parent  # the scripts folder of the Python running this
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == f"kvmon {kvmon.__version__}"


def test_install_twice_then_uninstall_leaves_nothing(xdg: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--install-desktop"]) == 0
    assert cli.main(["--install-desktop"]) == 0  # again: the same files, replaced
    assert _tree(xdg) == _expected()
    capsys.readouterr()
    assert cli.main(["--uninstall-desktop"]) == 0
    out = capsys.readouterr().out
    assert _tree(xdg) == set()
    assert out.count("kvmon: removed ") == len(_expected())
    assert not list((xdg / "icons" / "hicolor").iterdir()), "the icon size folders it emptied are gone"
    assert cli.main(["--uninstall-desktop"]) == 0
    assert "nothing to remove" in capsys.readouterr().out


def test_a_real_subprocess_from_an_empty_folder(tmp_path: Path) -> None:
    """The installed command itself, from a folder outside the checkout, with no PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(XDG_DATA_HOME=str(tmp_path / "data"), XDG_DATA_DIRS=str(tmp_path / "none"), HOME=str(tmp_path))
    exe = str(desktop.entry_point())
    out = subprocess.run([exe, "--install-desktop"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    _validate(tmp_path / "data" / "applications" / "kvmon.desktop")
    out = subprocess.run([exe, "--uninstall-desktop"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and _tree(tmp_path / "data") == set(), out.stdout + out.stderr


def test_a_path_that_needs_quoting_still_validates(xdg: Path) -> None:
    exe = xdg.parent / "my apps" / "kvmon $HOME 100%" / "bin" / "kvmon"
    desktop.install(xdg, exe)
    entry = (xdg / "applications" / "kvmon.desktop").read_text()
    quoted = '"' + str(exe).replace("$", "\\$").replace("%", "%%") + '"'
    assert f"\nExec={quoted.replace(chr(92), chr(92) * 2)} --demo\n" in entry
    assert f"\nTryExec={exe}\n" in entry  # a plain string value: no quotes, no field codes
    _validate(xdg / "applications" / "kvmon.desktop")


def test_the_bundle_runs_its_own_executable(xdg: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """The .deb's and the tarball's kvmon is PyInstaller's executable itself, and it is removed by that one."""
    exe = tmp_path / "kvmon-0.2.0" / "kvmon"
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", str(exe))
    assert desktop.entry_point() == exe
    assert cli.main(["--install-desktop"]) == 0
    out = capsys.readouterr().out
    assert f"Remove it with: {exe} --uninstall-desktop (before you delete {exe.parent})" in out and "pipx" not in out
    assert f"\nExec={exe}\n" in (xdg / "applications" / "kvmon.desktop").read_text()


def test_says_when_it_takes_the_place_of_the_system_entry(xdg: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    system = tmp_path / "usr-share"
    (system / "applications").mkdir(parents=True)
    (system / "applications" / "kvmon.desktop").write_text("[Desktop Entry]\n")
    monkeypatch.setenv("XDG_DATA_DIRS", f"{system}:relative/ignored")
    assert cli.main(["--install-desktop"]) == 0
    assert f"takes the place of {system / 'applications' / 'kvmon.desktop'}" in capsys.readouterr().out


# --- the pieces -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("arg", "written"), [
    ("/opt/kvmon/kvmon", "/opt/kvmon/kvmon"),
    ("/home/a b/kvmon", '"/home/a b/kvmon"'),
    ("/x/50%/kvmon", "/x/50%%/kvmon"),
    ("/x/$HOME/kvmon", '"/x/\\\\$HOME/kvmon"'),
    ('/x/"q"/kvmon', '"/x/\\\\"q\\\\"/kvmon"'),
    ("/x/back\\slash/kvmon", '"/x/back\\\\\\\\slash/kvmon"'),
    ("/x/`cmd`/kvmon", '"/x/\\\\`cmd\\\\`/kvmon"'),
])
def test_exec_arg_quotes_and_escapes(arg: str, written: str) -> None:
    assert desktop.exec_arg(arg) == written


@pytest.mark.parametrize("bad", ["/x/new\nline/kvmon", "/x/tab\there/kvmon", "/x/\x1b/kvmon"])
def test_a_control_character_is_refused(bad: str) -> None:
    with pytest.raises(desktop.DesktopError, match="control character"):
        desktop.exec_arg(bad)
    with pytest.raises(desktop.DesktopError, match="control character"):
        desktop.string_value(bad)


def test_xdg_data_home() -> None:
    assert desktop.xdg_data_home({"XDG_DATA_HOME": "/data", "HOME": "/home/u"}) == Path("/data")
    assert desktop.xdg_data_home({"XDG_DATA_HOME": "rel/dir", "HOME": "/home/u"}) == Path("/home/u/.local/share")
    assert desktop.xdg_data_home({"XDG_DATA_HOME": "", "HOME": "/home/u"}) == Path("/home/u/.local/share")
    assert desktop.xdg_data_home({"HOME": "/home/u"}) == Path("/home/u/.local/share")


def test_a_template_without_kvmon_in_exec_is_refused() -> None:
    with pytest.raises(desktop.DesktopError, match="runs 'python'"):
        desktop.desktop_entry("[Desktop Entry]\nExec=python -m kvmon\n", Path("/x/kvmon"))
    with pytest.raises(desktop.DesktopError, match="no \\[Desktop Entry\\] group"):
        desktop.desktop_entry("[Other]\nName=x\n", Path("/x/kvmon"))


# --- refusals ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("platform", "says"), [("darwin", "kvmon.app from the kvmon .dmg"),
                                                ("win32", "Start menu"), ("emscripten", "has none")])
def test_no_freedesktop_menus_is_a_clear_refusal(xdg: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str], platform: str, says: str) -> None:
    monkeypatch.setattr(sys, "platform", platform)
    for flag in ("--install-desktop", "--uninstall-desktop"):
        assert cli.main([flag]) == 2
        err = capsys.readouterr().err
        assert f"kvmon: {flag}: " in err and "freedesktop (XDG)" in err and says in err
    assert not xdg.exists()


def test_an_unwritable_data_folder_is_refused_with_nothing_written(xdg: Path, capsys: pytest.CaptureFixture[str]
                                                                     ) -> None:
    xdg.parent.mkdir(parents=True, exist_ok=True)
    xdg.write_text("a file where the data folder should be")
    assert cli.main(["--install-desktop"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kvmon: --install-desktop: cannot write ") and str(xdg) in err
    assert "nothing was installed" in err
    assert xdg.read_text() == "a file where the data folder should be"


def test_a_failure_half_way_takes_back_what_it_staged(xdg: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """applications/ is writable but the icon folder is blocked: no entry, no staging file, no folder made is left."""
    (xdg / "icons").mkdir(parents=True)
    (xdg / "icons" / "hicolor").write_text("in the way")
    assert cli.main(["--install-desktop"]) == 1
    assert "cannot write " + str(xdg / "icons" / "hicolor") in capsys.readouterr().err
    assert _tree(xdg) == {"icons/hicolor"}
    assert not (xdg / "applications").exists(), "the folder it made for the entry is taken back"


def test_permission_denied_names_the_folder(xdg: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """The error a user's read-only icon folder gives (root, running these tests, writes through permissions)."""
    real = desktop.tempfile.mkstemp
    blocked = xdg / "icons" / "hicolor" / "64x64" / "apps"

    def mkstemp(*args: object, **kw: object) -> tuple[int, str]:
        if Path(str(kw["dir"])) == blocked:
            raise PermissionError(13, "Permission denied", str(blocked / ".kvmon.png.x.tmp"))
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(desktop.tempfile, "mkstemp", mkstemp)
    assert cli.main(["--install-desktop"]) == 1
    err = capsys.readouterr().err
    assert f"cannot write {blocked / '.kvmon.png.x.tmp'}: Permission denied (nothing was installed)" in err
    assert _tree(xdg) == set() and not xdg.exists()


def test_a_failure_while_moving_in_takes_back_the_files_already_moved(xdg: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    real, moved = os.replace, []

    def replace(src: str, dst: Path) -> None:
        if len(moved) == 3:
            raise OSError(28, "No space left on device", str(dst))
        real(src, dst)
        moved.append(dst)

    monkeypatch.setattr(desktop.os, "replace", replace)
    assert cli.main(["--install-desktop"]) == 1
    assert "No space left on device (nothing was installed)" in capsys.readouterr().err
    assert len(moved) == 3 and not xdg.exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through folder permissions")
def test_a_read_only_folder_is_refused(xdg: Path, capsys: pytest.CaptureFixture[str]) -> None:
    xdg.mkdir(parents=True)
    xdg.chmod(0o555)
    try:
        assert cli.main(["--install-desktop"]) == 1
        assert "Permission denied" in capsys.readouterr().err
        assert _tree(xdg) == set()
    finally:
        xdg.chmod(0o755)


def test_an_entry_it_did_not_write_is_left_with_its_icons(xdg: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--install-desktop"]) == 0
    entry = xdg / "applications" / "kvmon.desktop"
    mine = "[Desktop Entry]\nType=Application\nName=kvmon (mine)\nExec=/opt/own/kvmon\nIcon=kvmon\n"
    entry.write_text(mine)
    capsys.readouterr()
    assert cli.main(["--uninstall-desktop"]) == 1
    err = capsys.readouterr().err
    assert f"kvmon: left {entry}: not written by kvmon --install-desktop" in err
    assert entry.read_text() == mine and _tree(xdg) == _expected()


def test_no_installed_command_is_a_clear_refusal(monkeypatch: pytest.MonkeyPatch, xdg: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Run from a source tree with no kvmon installed: nothing to point the menu at, and it says how to get one."""

    monkeypatch.setattr(metadata, "distributions", lambda **kw: iter(()))
    assert cli.main(["--install-desktop"]) == 1
    assert "pipx install kvmon" in capsys.readouterr().err
    assert not xdg.exists()


# --- --print-path -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(resources.NAMED))
def test_print_path(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--print-path", name]) == 0
    printed = Path(capsys.readouterr().out.strip())
    assert printed == ROOT / "resources" / resources.NAMED[name] and printed.exists()


def test_print_path_of_a_missing_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(resources, "_files", lambda name: tmp_path)
    assert cli.main(["--print-path", "grafana"]) == 1
    assert "grafana/kvmon-fleet.json is missing from this installation" in capsys.readouterr().err
