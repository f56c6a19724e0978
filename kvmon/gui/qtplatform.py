"""Before Qt starts: is there a display, and can Qt's platform plugin load on this system?

Qt aborts (exit 134) when its xcb plugin cannot load, with a generic hint about ``libxcb-cursor0`` whatever is
really missing. This module asks the plugin itself: ``ldd`` on ``libqxcb.so`` (or ``libqwayland.so``) lists the
shared libraries the dynamic loader cannot find, and ``/etc/os-release`` says which package manager installs
them, so kvmon can print the one command that fixes it. It imports no Qt (it runs before Qt loads).
"""

from __future__ import annotations

import importlib.util
import os
import platform
import shutil
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# soname -> package per package manager (apt: Debian/Ubuntu, dnf: Fedora/RHEL, pacman: Arch, zypper: openSUSE):
# the libraries Qt's xcb and wayland platform plugins and Qt's own libraries load from the system.
PACKAGES: dict[str, tuple[str, str, str, str]] = {
    "libGL.so.1": ("libgl1", "libglvnd-glx", "libglvnd", "libGL1"),
    "libEGL.so.1": ("libegl1", "libglvnd-egl", "libglvnd", "libEGL1"),
    "libOpenGL.so.0": ("libopengl0", "libglvnd-opengl", "libglvnd", "libOpenGL0"),
    "libGLX.so.0": ("libglx0", "libglvnd-glx", "libglvnd", "libGLX0"),
    "libGLdispatch.so.0": ("libglvnd0", "libglvnd", "libglvnd", "libGLdispatch0"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon", "libxkbcommon", "libxkbcommon0"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11", "libxkbcommon-x11", "libxkbcommon-x11-0"),
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor", "xcb-util-cursor", "libxcb-cursor0"),
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm", "xcb-util-wm", "libxcb-icccm4"),
    "libxcb-util.so.1": ("libxcb-util1", "xcb-util", "xcb-util", "libxcb-util1"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image", "xcb-util-image", "libxcb-image0"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms", "xcb-util-keysyms", "libxcb-keysyms1"),
    "libxcb-render-util.so.0": ("libxcb-render-util0", "xcb-util-renderutil", "xcb-util-renderutil",
                                "libxcb-render-util0"),
    "libxcb-randr.so.0": ("libxcb-randr0", "libxcb", "libxcb", "libxcb-randr0"),
    "libxcb-shm.so.0": ("libxcb-shm0", "libxcb", "libxcb", "libxcb-shm0"),
    "libxcb-sync.so.1": ("libxcb-sync1", "libxcb", "libxcb", "libxcb-sync1"),
    "libxcb-xfixes.so.0": ("libxcb-xfixes0", "libxcb", "libxcb", "libxcb-xfixes0"),
    "libxcb-render.so.0": ("libxcb-render0", "libxcb", "libxcb", "libxcb-render0"),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb", "libxcb", "libxcb-shape0"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb", "libxcb", "libxcb-xkb1"),
    "libxcb-xinerama.so.0": ("libxcb-xinerama0", "libxcb", "libxcb", "libxcb-xinerama0"),
    "libxcb.so.1": ("libxcb1", "libxcb", "libxcb", "libxcb1"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb", "libx11", "libX11-xcb1"),
    "libX11.so.6": ("libx11-6", "libX11", "libx11", "libX11-6"),
    "libXau.so.6": ("libxau6", "libXau", "libxau", "libXau6"),
    "libXdmcp.so.6": ("libxdmcp6", "libXdmcp", "libxdmcp", "libXdmcp6"),
    "libXrender.so.1": ("libxrender1", "libXrender", "libxrender", "libXrender1"),
    "libglib-2.0.so.0": ("libglib2.0-0", "glib2", "glib2", "libglib-2_0-0"),
    "libgthread-2.0.so.0": ("libglib2.0-0", "glib2", "glib2", "libgthread-2_0-0"),
    "libfontconfig.so.1": ("libfontconfig1", "fontconfig", "fontconfig", "libfontconfig1"),
    "libfreetype.so.6": ("libfreetype6", "freetype", "freetype2", "libfreetype6"),
    "libdbus-1.so.3": ("libdbus-1-3", "dbus-libs", "dbus", "libdbus-1-3"),
    "libwayland-client.so.0": ("libwayland-client0", "libwayland-client", "wayland", "libwayland-client0"),
    "libwayland-cursor.so.0": ("libwayland-cursor0", "libwayland-cursor", "wayland", "libwayland-cursor0"),
    "libwayland-egl.so.1": ("libwayland-egl1", "libwayland-egl", "wayland", "libwayland-egl1"),
    "libpng16.so.16": ("libpng16-16", "libpng", "libpng", "libpng16-16"),
    "libz.so.1": ("zlib1g", "zlib", "zlib", "libz1"),
    "libzstd.so.1": ("libzstd1", "libzstd", "zstd", "libzstd1"),
    "libexpat.so.1": ("libexpat1", "expat", "expat", "libexpat1"),
}
MANAGERS = ("apt", "dnf", "pacman", "zypper")
INSTALL = {"apt": "sudo apt install", "dnf": "sudo dnf install", "pacman": "sudo pacman -S", "zypper":
           "sudo zypper install"}
# os-release ID / ID_LIKE words -> package manager
_DISTROS = {"debian": "apt", "ubuntu": "apt", "linuxmint": "apt", "pop": "apt", "raspbian": "apt",
            "fedora": "dnf", "rhel": "dnf", "centos": "dnf", "rocky": "dnf", "almalinux": "dnf",
            "arch": "pacman", "manjaro": "pacman", "endeavouros": "pacman",
            "opensuse": "zypper", "suse": "zypper", "sles": "zypper", "opensuse-leap": "zypper",
            "opensuse-tumbleweed": "zypper"}
PLUGIN_FILES = {"xcb": "libqxcb.so", "wayland": "libqwayland.so"}
WINDOWED = ("xcb", "wayland")


@dataclass(frozen=True)
class StartupProblem:
    """Why the dashboard cannot open here, in words for the terminal; ``status`` is the exit status."""

    message: str
    status: int = 2
    missing: tuple[str, ...] = ()


def package_manager(os_release: Mapping[str, str]) -> str | None:
    """apt, dnf, pacman or zypper for this distribution (from /etc/os-release's ID and ID_LIKE), else None."""
    words = [os_release.get("ID", ""), *os_release.get("ID_LIKE", "").split()]
    for w in words:
        w = w.strip().lower()
        if w in _DISTROS:
            return _DISTROS[w]
        if w.startswith("opensuse"):
            return "zypper"
    return None


def read_os_release() -> dict[str, str]:
    """The system's os-release (/etc, else /usr/lib); empty when there is none."""
    try:
        return platform.freedesktop_os_release()
    except OSError:
        return {}


def install_command(sonames: Sequence[str], manager: str | None) -> str:
    """The one command that installs every missing library, or where to look when the distribution is unknown."""
    if manager in MANAGERS:
        col = MANAGERS.index(manager)
        pkgs: list[str] = []
        for so in sonames:
            if so in PACKAGES:
                pkg = PACKAGES[so][col]
            elif manager in ("dnf", "zypper"):  # RPM lists every library as a capability of its package
                pkg = f"'{so}()(64bit)'"
            else:
                continue
            if pkg not in pkgs:
                pkgs.append(pkg)
        unknown = [so for so in sonames if so not in PACKAGES and manager in ("apt", "pacman")]
        cmd = f"{INSTALL[manager]} {' '.join(pkgs)}" if pkgs else ""
        if unknown:
            finder = "apt-file search" if manager == "apt" else "pacman -F"
            more = f"find the package of {', '.join(unknown)} with {finder}"
            cmd = f"{cmd}; {more}" if cmd else more
        return cmd
    debian = " ".join(dict.fromkeys(PACKAGES[so][0] for so in sonames if so in PACKAGES))
    return f"install the packages that provide them (on Debian or Ubuntu: sudo apt install {debian})" if debian \
        else "install the packages that provide them"


def plugin_path(plugin: str) -> Path | None:
    """Qt's platform plugin file (PySide6's own, in a source install or a bundle), or None when not found."""
    name = PLUGIN_FILES.get(plugin)
    if name is None:
        return None
    roots: list[Path] = []
    try:
        spec = importlib.util.find_spec("PySide6")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        roots.extend(Path(p) for p in spec.submodule_search_locations)
    meipass = getattr(sys, "_MEIPASS", None)
    if meipass:
        roots.append(Path(meipass) / "PySide6")
    for root in roots:
        for sub in ("Qt/plugins/platforms", "plugins/platforms"):
            p = root / sub / name
            if p.is_file():
                return p
    return None


def missing_libraries(plugin_file: Path, ldd: str | None = None) -> tuple[str, ...] | None:
    """The shared libraries the dynamic loader cannot find for ``plugin_file`` (from ``ldd``; its dependencies'
    dependencies included), or None when that cannot be asked (no ldd: not Linux/glibc, or it failed)."""
    ldd = ldd or shutil.which("ldd")
    if ldd is None:
        return None
    try:
        out = subprocess.run([ldd, str(plugin_file)], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    missing: list[str] = []
    for line in out.stdout.splitlines():
        name, sep, where = line.strip().partition("=>")
        if sep and "not found" in where:
            so = name.strip()
            if so and so not in missing:
                missing.append(so)
    if out.returncode != 0 and not missing:
        return None
    return tuple(missing)


def chosen_platform(env: Mapping[str, str]) -> list[str]:
    """The platform plugins Qt will try, in order: QT_QPA_PLATFORM's list, else wayland (in a Wayland session)
    then xcb."""
    asked = env.get("QT_QPA_PLATFORM", "").strip()
    if asked:
        return [p.split(":")[0].strip() for p in asked.split(";") if p.strip()]
    wayland = bool(env.get("WAYLAND_DISPLAY")) or env.get("XDG_SESSION_TYPE") == "wayland"
    return ["wayland", "xcb"] if wayland else ["xcb"]


def display_reachable(plugin: str, env: Mapping[str, str]) -> bool | None:
    """Whether the display server answers on its socket (X11: DISPLAY's unix socket, abstract socket or TCP port;
    Wayland: its socket in XDG_RUNTIME_DIR); None when that cannot be told. A stale DISPLAY (a tmux session
    outliving its desktop) would otherwise abort Qt."""
    if plugin == "wayland":
        name = env.get("WAYLAND_DISPLAY", "")
        path = name if name.startswith("/") else os.path.join(env.get("XDG_RUNTIME_DIR", ""), name)
        return _connects(socket.AF_UNIX, path) if env.get("XDG_RUNTIME_DIR") or name.startswith("/") else None
    display = env.get("DISPLAY", "")
    host, sep, rest = display.rpartition(":")
    number = rest.split(".")[0]
    if not sep or not number.isdigit():
        return None
    if host in ("", "unix"):
        path = f"/tmp/.X11-unix/X{number}"
        return _connects(socket.AF_UNIX, path) or _connects(socket.AF_UNIX, "\0" + path)
    if host.startswith("/"):  # macOS launchd's socket path
        return None
    return _connects(socket.AF_INET, (host, 6000 + int(number)))


def _connects(family: int, address: object) -> bool:
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.settimeout(1.0)
            sock.connect(address)  # type: ignore[arg-type]
        return True
    except (OSError, ValueError):
        return False


def startup_problem(env: Mapping[str, str] | None = None, *, platform: str | None = None,
                    os_release: Mapping[str, str] | None = None,
                    plugin_files: Mapping[str, Path] | None = None,
                    check_display: bool = True) -> StartupProblem | None:
    """Why a window cannot open here (no display; the platform plugin's libraries missing), or None.

    Only on Linux and for the windowed platforms (xcb, wayland); offscreen and the others need nothing.
    ``plugin_files``: the plugin files to ask (default: PySide6's own); ``check_display``: also ask the display
    server's socket.
    """
    env = os.environ if env is None else env
    if not (platform or sys.platform).startswith("linux"):
        return None
    plugins = chosen_platform(env)
    if not plugins or plugins[0] not in WINDOWED:
        return None
    has_display = {"xcb": bool(env.get("DISPLAY")), "wayland": bool(env.get("WAYLAND_DISPLAY"))}
    candidates = [p for p in plugins if p in WINDOWED and has_display[p]]
    if not candidates:
        return StartupProblem("kvmon: no display to open a window on (DISPLAY and WAYLAND_DISPLAY are not set): "
                              "run it in a desktop session or with ssh -X; kvmon once and kvmon screenshot need none")
    if check_display:
        candidates = [p for p in candidates if display_reachable(p, env) is not False]
        if not candidates:
            shown = " / ".join(f"{k}={env[k]}" for k in ("DISPLAY", "WAYLAND_DISPLAY") if env.get(k))
            return StartupProblem(f"kvmon: no display answers at {shown}: is the desktop session still running? "
                                  "kvmon once and kvmon screenshot need none")
    problems: list[tuple[str, tuple[str, ...]]] = []
    for plugin in candidates:
        f = plugin_files.get(plugin) if plugin_files is not None else plugin_path(plugin)
        missing = missing_libraries(f) if f is not None else None
        if not missing:  # loads, or cannot be checked here: let Qt try
            return None
        problems.append((plugin, missing))
    plugin, missing = problems[-1]  # the last one Qt falls back to (xcb in a Wayland session)
    manager = package_manager(read_os_release() if os_release is None else os_release)
    return StartupProblem(
        f"kvmon: Qt's {plugin} platform cannot load: this system lacks {', '.join(missing)}\n"
        f"  {install_command(missing, manager)}", missing=missing)


def window_problem() -> int | None:
    """For the commands that open a window: print why it cannot open and return the exit status, else None."""
    problem = startup_problem()
    if problem is None:
        return None
    print(problem.message, file=sys.stderr)
    return problem.status
