"""``kvmon --install-desktop`` / ``--uninstall-desktop``: this installation's kvmon in the user's applications menu.

For pip, pipx and uv users and the portable tarball (the .deb installs its own entry for every user): the packaged
desktop entry, its ``Exec`` and ``TryExec`` pointed at this installation's ``kvmon`` by absolute path, and the icon
in every hicolor size, written to the user's XDG data folder ($XDG_DATA_HOME, else ~/.local/share). Linux and the
other freedesktop systems only. Every file is staged beside its place first, so an error leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvmon import resources

DESKTOP_ID = "kvmon.desktop"
ICON_NAME = "kvmon"
#: The key that marks an entry as written here: --uninstall-desktop removes no entry without it.
MARKER_KEY = "X-kvmon-Installed-By"
MARKER_LINE = f"{MARKER_KEY}=kvmon --install-desktop"
#: The command named in the packaged entry's Exec lines, replaced by this installation's absolute path.
TEMPLATE_COMMAND = "kvmon"
#: sys.platform prefixes of the systems whose desktops follow the freedesktop (XDG) menu and icon specifications.
XDG_PLATFORMS = ("linux", "freebsd", "openbsd", "netbsd", "dragonfly")
#: Characters that make an Exec argument need double quotes (Desktop Entry Specification, "The Exec key").
_EXEC_RESERVED = set(" \t\n\"'\\><~|&;$*?#()`")
_EXEC_ESCAPED_IN_QUOTES = set('"`$\\')


class DesktopError(Exception):
    """The desktop entry could not be written or removed; the message says what and why (nothing half done)."""

    def __init__(self, message: str, exit_status: int = 1) -> None:
        super().__init__(message)
        self.exit_status = exit_status


@dataclass
class Removal:
    """What --uninstall-desktop removed, and what it left (with why)."""

    removed: list[Path] = field(default_factory=list)
    kept: list[tuple[Path, str]] = field(default_factory=list)


def check_platform() -> None:
    """Raise DesktopError (exit 2) on a system without freedesktop menus, saying what gives kvmon a menu entry there."""
    platform = sys.platform
    if platform.startswith(XDG_PLATFORMS):
        return
    if platform == "darwin":
        where = "on macOS, kvmon.app from the kvmon .dmg goes in Applications"
    elif platform.startswith(("win", "cygwin", "msys")):
        where = "on Windows, the kvmon installer (kvmon-<version>-windows-x64-setup.exe) adds it to the Start menu"
    else:
        where = f"this system ({platform}) has none"
    raise DesktopError("the desktop entry is a freedesktop (XDG) menu entry, for Linux and the BSDs; " + where,
                       exit_status=2)


def xdg_data_home(environ: Mapping[str, str] = os.environ) -> Path:
    """$XDG_DATA_HOME when it is an absolute path (the specification ignores a relative one), else ~/.local/share."""
    value = environ.get("XDG_DATA_HOME", "")
    if value and os.path.isabs(value):
        return Path(value)
    home = environ.get("HOME") or str(Path.home())
    return Path(home) / ".local" / "share"


def system_entries(environ: Mapping[str, str] = os.environ) -> list[Path]:
    """kvmon's desktop entries in the system data folders ($XDG_DATA_DIRS, e.g. the .deb's), which a user entry of the
    same name takes the place of."""
    dirs = environ.get("XDG_DATA_DIRS") or "/usr/local/share:/usr/share"
    found = [Path(d) / "applications" / DESKTOP_ID for d in dirs.split(":") if d and os.path.isabs(d)]
    return [p for p in dict.fromkeys(found) if p.is_file()]


def entry_point() -> Path:
    """The absolute path of the ``kvmon`` command of the installation running now: the bundle's own executable, or
    the gui-script that pip, pipx or uv installed with the distribution this kvmon was imported from (its RECORD)."""
    if getattr(sys, "frozen", False):
        return Path(sys.executable).resolve()
    from importlib import metadata

    names = {TEMPLATE_COMMAND, f"{TEMPLATE_COMMAND}.exe"}
    for dist in metadata.distributions(name="kvmon"):
        if not _provides_running_kvmon(dist):
            continue
        for f in dist.files or []:
            if f.name in names and f.parent.name in ("bin", "Scripts"):
                path = Path(str(dist.locate_file(f))).resolve()
                if path.is_file() and os.access(path, os.X_OK):
                    return path
    raise DesktopError("this kvmon has no installed `kvmon` command to put in the menu (run from a source tree?); "
                       "install it with `pipx install kvmon` or `uv tool install kvmon` and run that kvmon")


def _provides_running_kvmon(dist: Any) -> bool:
    """Whether ``dist`` installed the kvmon package running now: its files hold this kvmon/__init__.py, or it is an
    editable install of the source folder this kvmon comes from (a build's kvmon.egg-info in a checkout, or another
    kvmon installed beside, is not)."""
    import kvmon

    running = Path(kvmon.__file__).resolve()
    if Path(str(dist.locate_file("kvmon/__init__.py"))).resolve() == running and dist.read_text("RECORD"):
        return True
    try:
        direct = json.loads(dist.read_text("direct_url.json") or "null")
    except ValueError:
        return False
    if not isinstance(direct, dict) or not (direct.get("dir_info") or {}).get("editable"):
        return False
    url = urllib.parse.urlparse(str(direct.get("url", "")))
    if url.scheme != "file":
        return False
    source = Path(urllib.request.url2pathname(url.path))
    return (source / "kvmon" / "__init__.py").resolve() == running


def exec_arg(arg: str) -> str:
    """One argument of an Exec line: quoted and escaped as the Desktop Entry Specification asks, then escaped as a
    string value (each backslash doubled); % doubled so that no field code is read into it."""
    if any(c in "\r\n" or ord(c) < 0x20 for c in arg):
        raise DesktopError(f"the path {arg!r} has a control character, which a desktop entry cannot hold")
    arg = arg.replace("%", "%%")
    if any(c in _EXEC_RESERVED for c in arg):
        arg = '"' + "".join("\\" + c if c in _EXEC_ESCAPED_IN_QUOTES else c for c in arg) + '"'
    return arg.replace("\\", "\\\\")


def string_value(text: str) -> str:
    """A desktop entry string value (TryExec): backslashes doubled, control characters refused."""
    if any(c in "\r\n" or ord(c) < 0x20 for c in text):
        raise DesktopError(f"the path {text!r} has a control character, which a desktop entry cannot hold")
    return text.replace("\\", "\\\\")


def desktop_entry(template: str, exe: Path) -> str:
    """The packaged entry with every Exec and TryExec naming ``exe`` by absolute path, and the marker key."""
    out: list[str] = []
    seen_exec = False
    for line in template.splitlines():
        if line.startswith("Exec="):
            command, _, rest = line.removeprefix("Exec=").partition(" ")
            if command != TEMPLATE_COMMAND:
                raise DesktopError(f"the packaged desktop entry runs {command!r}, not {TEMPLATE_COMMAND!r}")
            line = "Exec=" + exec_arg(str(exe)) + (" " + rest if rest else "")
            seen_exec = True
        elif line.startswith("TryExec="):
            line = "TryExec=" + string_value(str(exe))
        out.append(line)
        if line == "[Desktop Entry]":
            out.append(MARKER_LINE)
    if not seen_exec or MARKER_LINE not in out:
        raise DesktopError("the packaged desktop entry has no [Desktop Entry] group with an Exec line")
    return "\n".join(out) + "\n"


def planned_files(data_home: Path, exe: Path) -> dict[Path, bytes]:
    """Every file --install-desktop writes, with its contents: the entry, then the icons (each PNG size, the SVG)."""
    template = resources.named_path("desktop")
    svg = resources.icon_path()
    pngs = resources.icon_pngs()
    if template is None or svg is None or not pngs:
        raise DesktopError("this installation lacks kvmon's desktop entry or icons (kvmon/resources is incomplete)")
    files = {data_home / "applications" / DESKTOP_ID:
             desktop_entry(template.read_text(encoding="utf-8"), exe).encode("utf-8")}
    icons = data_home / "icons" / "hicolor"
    for size, png in pngs.items():
        files[icons / f"{size}x{size}" / "apps" / f"{ICON_NAME}.png"] = png.read_bytes()
    files[icons / "scalable" / "apps" / f"{ICON_NAME}.svg"] = svg.read_bytes()
    return files


def _make_dirs(path: Path, made: list[Path]) -> None:
    """Make ``path`` and its missing parents, outermost first, adding each folder made to ``made`` as it goes."""
    missing = [p for p in (path, *path.parents) if not p.exists()]  # innermost first
    for d in reversed(missing):
        d.mkdir()
        made.append(d)


def write_all(files: dict[Path, bytes]) -> None:
    """Stage every file beside its place, then move them all in; on an error take back everything it staged, moved
    in or made (folders too), so that nothing is left half installed."""
    staged: list[tuple[Path, Path]] = []
    placed: list[Path] = []
    made: list[Path] = []
    current = next(iter(files))
    try:
        for target, data in files.items():
            current = target
            _make_dirs(target.parent, made)
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
            staged.append((Path(tmp), target))
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.chmod(tmp, 0o644)
        for tmp_path, target in staged:
            current = target
            os.replace(tmp_path, target)
            placed.append(target)
    except OSError as exc:
        for leftover in [tmp for tmp, _ in staged] + placed:
            leftover.unlink(missing_ok=True)
        for d in reversed(made):
            try:
                d.rmdir()
            except OSError:
                pass
        where = exc.filename or current
        raise DesktopError(f"cannot write {where}: {exc.strerror or exc} (nothing was installed)") from exc


def install(data_home: Path | None = None, exe: Path | None = None) -> list[Path]:
    """Write this kvmon's desktop entry and icons under ``data_home``; the files written."""
    check_platform()
    data_home = data_home if data_home is not None else xdg_data_home()
    files = planned_files(data_home, exe if exe is not None else entry_point())
    write_all(files)
    return list(files)


def _ours(entry: Path) -> bool:
    try:
        return MARKER_LINE in entry.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return False


def uninstall(data_home: Path | None = None) -> Removal:
    """Remove what --install-desktop wrote under ``data_home`` (an entry without its marker is left, and its icons);
    icon folders left empty go too."""
    check_platform()
    data_home = data_home if data_home is not None else xdg_data_home()
    result = Removal()
    entry = data_home / "applications" / DESKTOP_ID
    hicolor = data_home / "icons" / "hicolor"
    icons = sorted([*hicolor.glob(f"*/apps/{ICON_NAME}.png"), *hicolor.glob(f"*/apps/{ICON_NAME}.svg")])
    if entry.exists() and not _ours(entry):
        reason = f"not written by kvmon --install-desktop (it has no {MARKER_KEY} line)"
        result.kept.append((entry, reason))
        result.kept += [(p, f"the icon of {entry}") for p in icons]
        return result
    for p in ([entry] if entry.exists() else []) + icons:
        try:
            p.unlink()
        except OSError as exc:
            raise DesktopError(f"cannot remove {p}: {exc.strerror or exc}"
                               + (f" (removed before it: {', '.join(map(str, result.removed))})"
                                  if result.removed else "")) from exc
        result.removed.append(p)
        if p.suffix in (".png", ".svg"):
            for d in (p.parent, p.parent.parent):  # <size>/apps, then <size>, when nothing else is in them
                try:
                    d.rmdir()
                except OSError:
                    break
    return result


def run_install() -> int:
    """``kvmon --install-desktop``: write the entry and icons, say what was written and how to remove it."""
    try:
        check_platform()
        exe = entry_point()
        written = install(exe=exe)
    except DesktopError as exc:
        print(f"kvmon: --install-desktop: {exc}", file=sys.stderr)
        return exc.exit_status
    print(f"kvmon: added kvmon to your applications menu; it runs {exe}. Written:")
    for p in written:
        print(f"  {p}")
    for system in system_entries():
        print(f"For you it takes the place of {system} (installed with the system package).")
    if getattr(sys, "frozen", False):
        remove = f"{exe} --uninstall-desktop (before you delete {exe.parent})"
    else:
        remove = "kvmon --uninstall-desktop (before `pipx uninstall kvmon` or `uv tool uninstall kvmon`)"
    print(f"Most desktops show it at once, some after you log in again. Remove it with: {remove}.")
    return 0


def run_uninstall() -> int:
    """``kvmon --uninstall-desktop``: remove the entry and icons --install-desktop wrote, say what went."""
    try:
        data_home = xdg_data_home()
        result = uninstall(data_home)
    except DesktopError as exc:
        print(f"kvmon: --uninstall-desktop: {exc}", file=sys.stderr)
        return exc.exit_status
    for p in result.removed:
        print(f"kvmon: removed {p}")
    for p, why in result.kept:
        print(f"kvmon: left {p}: {why}", file=sys.stderr)
    if result.kept:
        return 1
    if not result.removed:
        print(f"kvmon: no desktop entry or icon of kvmon under {data_home}; nothing to remove")
    return 0
