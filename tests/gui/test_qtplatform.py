"""The first-run check: no display, or Qt's platform plugin missing system libraries, is said before Qt aborts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from repo_paths import ROOT

from kvmon.gui.qtplatform import (
    PACKAGES,
    chosen_platform,
    display_reachable,
    install_command,
    missing_libraries,
    package_manager,
    plugin_path,
    startup_problem,
)

needs_ldd = pytest.mark.skipif(shutil.which("ldd") is None or not sys.platform.startswith("linux"),
                               reason="ldd (glibc) is what the check asks; this system has none")


def _plugin_lacking(tmp_path: Path, soname: str, fake: str) -> Path:
    """A copy of PySide6's xcb plugin whose dependency ``soname`` is renamed ``fake`` (a library no system has),
    laid out as in PySide6 (its RUNPATH $ORIGIN/../../lib finds Qt's own libraries)."""
    real = plugin_path("xcb")
    assert real is not None, "PySide6's libqxcb.so not found"
    assert len(fake) == len(soname)
    qt = tmp_path / "Qt"
    (qt / "plugins" / "platforms").mkdir(parents=True)
    (qt / "lib").symlink_to(real.parents[2] / "lib")
    data = real.read_bytes()
    assert data.count(soname.encode() + b"\0") >= 1
    out = qt / "plugins" / "platforms" / "libqxcb.so"
    out.write_bytes(data.replace(soname.encode() + b"\0", fake.encode() + b"\0"))
    return out


@needs_ldd
def test_pyside6_xcb_plugin_loads_here() -> None:
    f = plugin_path("xcb")
    assert f is not None and f.name == "libqxcb.so"
    assert missing_libraries(f) == ()  # this machine has the libraries (the CI installs them)


@needs_ldd
def test_a_missing_dependency_of_the_plugin_is_named_from_the_plugin_itself(tmp_path: Path) -> None:
    plugin = _plugin_lacking(tmp_path, "libxcb-icccm.so.4", "libxcb-iccXm.so.4")
    assert missing_libraries(plugin) == ("libxcb-iccXm.so.4",)
    env = {"DISPLAY": ":99"}
    debian = {"ID": "debian", "VERSION_ID": "12"}
    p = startup_problem(env, platform="linux", os_release=debian, plugin_files={"xcb": plugin},
                        check_display=False)
    assert p is not None and p.status == 2 and p.missing == ("libxcb-iccXm.so.4",)
    assert "xcb platform cannot load" in p.message and "libxcb-iccXm.so.4" in p.message
    assert "xcb-cursor" not in p.message  # not Qt's generic hint
    fedora = startup_problem(env, platform="linux", os_release={"ID": "fedora"}, plugin_files={"xcb": plugin},
                             check_display=False)
    assert fedora is not None and "sudo dnf install 'libxcb-iccXm.so.4()(64bit)'" in fedora.message


def test_install_command_names_each_distributions_packages() -> None:
    missing = ("libxcb-icccm.so.4", "libxcb-keysyms.so.1")
    assert install_command(missing, "apt") == "sudo apt install libxcb-icccm4 libxcb-keysyms1"
    assert install_command(missing, "dnf") == "sudo dnf install xcb-util-wm xcb-util-keysyms"
    assert install_command(missing, "pacman") == "sudo pacman -S xcb-util-wm xcb-util-keysyms"
    assert install_command(missing, "zypper") == "sudo zypper install libxcb-icccm4 libxcb-keysyms1"
    # several libraries of one package: the package once
    assert install_command(("libxcb-randr.so.0", "libxcb-shm.so.0"), "dnf") == "sudo dnf install libxcb"
    assert "apt-file search" in install_command(("libfoo.so.3",), "apt")
    assert "pacman -F" in install_command(("libfoo.so.3",), "pacman")
    assert install_command(missing, None).startswith("install the packages that provide them (on Debian")


@pytest.mark.parametrize(("release", "manager"), [
    ({"ID": "debian"}, "apt"), ({"ID": "ubuntu", "ID_LIKE": "debian"}, "apt"),
    ({"ID": "linuxmint", "ID_LIKE": "ubuntu debian"}, "apt"), ({"ID": "fedora"}, "dnf"),
    ({"ID": "rocky", "ID_LIKE": "rhel centos fedora"}, "dnf"), ({"ID": "arch"}, "pacman"),
    ({"ID": "endeavouros", "ID_LIKE": "arch"}, "pacman"), ({"ID": "opensuse-tumbleweed", "ID_LIKE": "opensuse suse"},
                                                            "zypper"),
    ({"ID": "nixos"}, None), ({}, None)])
def test_package_manager_from_os_release(release: dict[str, str], manager: str | None) -> None:
    assert package_manager(release) == manager


def test_no_display_is_one_line_and_status_2() -> None:
    p = startup_problem({}, platform="linux")
    assert p is not None and p.status == 2
    assert "\n" not in p.message and "no display" in p.message
    # offscreen and the other headless platforms need nothing; neither do macOS and Windows
    assert startup_problem({"QT_QPA_PLATFORM": "offscreen"}, platform="linux") is None
    assert startup_problem({}, platform="darwin") is None
    assert startup_problem({}, platform="win32") is None


def test_which_platform_qt_tries() -> None:
    assert chosen_platform({}) == ["xcb"]
    assert chosen_platform({"WAYLAND_DISPLAY": "wayland-0", "DISPLAY": ":0"}) == ["wayland", "xcb"]
    assert chosen_platform({"QT_QPA_PLATFORM": "wayland;xcb"}) == ["wayland", "xcb"]
    assert chosen_platform({"QT_QPA_PLATFORM": "vnc:size=800x600"}) == ["vnc"]


@needs_ldd
def test_a_wayland_session_falls_back_to_xcb_like_qt(tmp_path: Path) -> None:
    broken = _plugin_lacking(tmp_path, "libxcb-icccm.so.4", "libxcb-iccXm.so.4")
    good = plugin_path("xcb")
    assert good is not None
    env = {"WAYLAND_DISPLAY": "wayland-0", "DISPLAY": ":0"}
    # the wayland plugin cannot load but xcb can (XWayland): Qt falls back, nothing to say
    assert startup_problem(env, platform="linux", plugin_files={"wayland": broken, "xcb": good},
                           check_display=False) is None
    p = startup_problem(env, platform="linux", os_release={"ID": "debian"},
                        plugin_files={"wayland": broken, "xcb": broken}, check_display=False)
    assert p is not None and "xcb platform" in p.message


def test_the_debian_names_match_the_packages_depends() -> None:
    """Every xcb library the plugin needs has its Debian package in the .deb's Depends and the CI's apt line."""
    script = (ROOT / "packaging" / "linux" / "build-deb.sh").read_text(encoding="utf-8")
    block = script.split('DEPENDS="libc6', 1)[1].split('"', 1)[0]
    depends = {d.strip().split(" ")[0] for d in block.replace("\n", " ").split(",")}
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    xcb = [so for so in PACKAGES if so.startswith(("libxcb", "libxkbcommon", "libX11-xcb"))]
    for so in xcb:
        assert PACKAGES[so][0] in depends, (so, PACKAGES[so][0], sorted(depends))
    for so in ("libxcb-icccm.so.4", "libxcb-keysyms.so.1", "libxcb-cursor.so.0", "libxcb-image.so.0"):
        assert PACKAGES[so][0] in ci


def test_the_dashboard_without_a_display_exits_2_with_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM", "XDG_SESSION_TYPE")}
    env["HOME"] = str(tmp_path)
    if not sys.platform.startswith("linux"):
        pytest.skip("the display check is for Linux")
    out = subprocess.run([sys.executable, "-m", "kvmon", "--demo"], env=env, capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "no display" in lines[0], out.stderr


def test_the_check_imports_no_qt() -> None:
    code = ("import sys; from kvmon.gui.qtplatform import startup_problem; startup_problem({}, platform='linux'); "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('PySide6', 'shiboken6')]; assert not bad, bad")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


@needs_ldd
def test_the_readme_names_every_library_the_plugin_loads() -> None:
    """The Quick start's apt line holds the Debian package of each library of the xcb plugin a desktop may lack."""
    f = plugin_path("xcb")
    assert f is not None
    out = subprocess.run(["ldd", str(f)], capture_output=True, text=True, timeout=30, check=True).stdout
    needed = [ln.split("=>")[0].strip() for ln in out.splitlines() if "=>" in ln]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    line = readme.split("sudo apt install make python3-venv", 1)[1].split("```", 1)[0]
    named = set(line.replace("\\", " ").split())
    xcb = [so for so in needed if so.startswith(("libxcb-", "libxkbcommon-x11", "libX11-xcb"))]
    assert xcb, needed
    missing = [(so, PACKAGES[so][0]) for so in xcb if PACKAGES[so][0] not in named]
    assert not missing, missing


@pytest.mark.skipif(shutil.which("Xvfb") is None, reason="Xvfb is not installed")
def test_a_display_that_does_not_answer_is_said_in_one_line(tmp_path: Path) -> None:
    from xvfb_server import _start_xvfb

    xvfb, display = _start_xvfb()
    try:
        assert display_reachable("xcb", {"DISPLAY": display}) is True
        assert display_reachable("xcb", {"DISPLAY": display + ".0"}) is True
    finally:
        xvfb.terminate()
        xvfb.wait(timeout=10)
    assert display_reachable("xcb", {"DISPLAY": display}) is False  # gone with its server
    p = startup_problem({"DISPLAY": display}, platform="linux")
    assert p is not None and p.status == 2 and "\n" not in p.message and f"DISPLAY={display}" in p.message
    assert display_reachable("xcb", {"DISPLAY": "weird"}) is None
    assert display_reachable("wayland", {"WAYLAND_DISPLAY": "wayland-0", "XDG_RUNTIME_DIR": str(tmp_path)}) is False
