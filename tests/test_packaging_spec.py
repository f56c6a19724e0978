"""The PyInstaller spec and the platform build definitions: they parse, exclude what kvmon never uses, keep what it
does, and never strip. The spec is executed here with stand-ins for PyInstaller's build classes."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from helpers_packaging import resource_files

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "packaging" / "pyinstaller" / "kvmon.spec"
LINUX = ROOT / "packaging" / "linux"


class _Recorder:
    """Stands in for one of PyInstaller's spec classes and remembers its arguments."""

    calls: dict[str, list[tuple[tuple[Any, ...], dict[str, Any]]]]

    def __init__(self, name: str, calls: dict[str, list[tuple[tuple[Any, ...], dict[str, Any]]]],
                 binaries: list[tuple[str, str, str]] | None = None,
                 datas: list[tuple[str, str, str]] | None = None) -> None:
        self.name, self.calls = name, calls
        self.binaries = list(binaries or [])
        self.datas = list(datas or [])

    def __call__(self, *args: Any, **kwargs: Any) -> _Recorder:
        self.calls.setdefault(self.name, []).append((args, kwargs))
        out = _Recorder(self.name, self.calls, self.binaries, self.datas)
        out.pure, out.scripts = [], []  # type: ignore[attr-defined]
        return out


SAMPLE_BINARIES = [
    ("libQt6Core.so.6", "/x", "BINARY"),
    ("PySide6/Qt/lib/libQt6Widgets.so.6", "/x", "BINARY"),
    ("PySide6/Qt/plugins/platforms/libqxcb.so", "/x", "BINARY"),
    ("PySide6/Qt/plugins/platforms/libqoffscreen.so", "/x", "BINARY"),
    ("PySide6/Qt/plugins/iconengines/libqsvgicon.so", "/x", "BINARY"),
    ("PySide6/Qt/plugins/platformthemes/libqxdgdesktopportal.so", "/x", "BINARY"),
    ("numpy.libs/libscipy_openblas64_-32a4b2a6.so", "/x", "BINARY"),
    ("libxcb-cursor.so.0", "/x", "BINARY"),
    # to be dropped:
    ("PySide6/Qt/lib/libQt6Quick.so.6", "/x", "BINARY"),
    ("PySide6/Qt/lib/libQt6Qml.so.6", "/x", "BINARY"),
    ("PySide6/Qt/lib/libQt6Pdf.so.6", "/x", "BINARY"),
    ("PySide6/Qt/plugins/qmltooling/libqmldbg_debugger.so", "/x", "BINARY"),
    ("PySide6/Qt/plugins/platformthemes/libqgtk3.so", "/x", "BINARY"),
    ("PySide6/Qt/plugins/imageformats/libqtiff.so", "/x", "BINARY"),
    ("libpango-1.0.so.0", "/x", "BINARY"),
    ("libcairo.so.2", "/x", "BINARY"),
]
KEPT_BINARIES = {b[0] for b in SAMPLE_BINARIES[:8]}
SAMPLE_DATAS = [
    ("PySide6/Qt/translations/qtbase_de.qm", "/x", "DATA"),
    ("PySide6/Qt/translations/qtdeclarative_de.qm", "/x", "DATA"),
    ("pyqtgraph/colors/maps/CET-L1.csv", "/x", "DATA"),
]


def _exec_spec(monkeypatch: pytest.MonkeyPatch, platform: str = "linux") -> tuple[dict[str, Any], dict[str, Any]]:
    calls: dict[str, list[tuple[tuple[Any, ...], dict[str, Any]]]] = {}
    hooks = types.ModuleType("PyInstaller.utils.hooks")
    hooks.collect_submodules = lambda name: [name, f"{name}.cli"]  # type: ignore[attr-defined]
    for name, mod in (("PyInstaller", types.ModuleType("PyInstaller")),
                      ("PyInstaller.utils", types.ModuleType("PyInstaller.utils")),
                      ("PyInstaller.utils.hooks", hooks)):
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(sys, "platform", platform)
    ns: dict[str, Any] = {
        "SPECPATH": str(SPEC.parent),
        "Analysis": _Recorder("Analysis", calls, SAMPLE_BINARIES, SAMPLE_DATAS),
        "PYZ": _Recorder("PYZ", calls), "EXE": _Recorder("EXE", calls),
        "COLLECT": _Recorder("COLLECT", calls), "BUNDLE": _Recorder("BUNDLE", calls),
        "__file__": str(SPEC), "__name__": "__main__",
    }
    exec(compile(SPEC.read_text(), str(SPEC), "exec"), ns)
    return ns, calls


def test_spec_compiles() -> None:
    compile(SPEC.read_text(), str(SPEC), "exec")


def test_spec_analysis_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    ns, calls = _exec_spec(monkeypatch)
    (args, kw), = calls["Analysis"]
    entry = Path(args[0][0])
    assert entry.is_file() and "from kvmon.cli import main" in entry.read_text()
    res = ROOT / "resources"
    for src, dest in kw["datas"]:
        assert Path(src).is_file(), src
        assert dest == ("kvmon" / Path(src).parent.relative_to(ROOT)).as_posix(), (src, dest)  # where the wheel has it
    shipped = set(resource_files())
    assert {Path(src) for src, _ in kw["datas"]} == shipped
    assert res / "grafana" / "kvmon-fleet.json" in shipped and res / "icons" / "png" / "kvmon-48.png" in shipped
    assert "pynvml" in kw["hiddenimports"] and "kvmon" in kw["hiddenimports"]
    assert ns["VERSION"] == __import__("kvmon").__version__


def test_spec_excludes_unused_qt(monkeypatch: pytest.MonkeyPatch) -> None:
    _ns, calls = _exec_spec(monkeypatch)
    excludes = set(calls["Analysis"][0][1]["excludes"])
    for mod in ("QtWebEngineCore", "QtWebEngineWidgets", "Qt3DCore", "QtQuick", "QtQml", "QtMultimedia",
                "QtPdf", "QtDesigner", "QtQuick3D", "QtCharts"):
        assert f"PySide6.{mod}" in excludes, mod
    assert "tkinter" in excludes and "pytest" in excludes


def _qt_modules_kvmon_imports() -> set[str]:
    used: set[str] = set()
    for path in (ROOT / "kvmon").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "PySide6":
                used.update(f"PySide6.{a.name}" for a in node.names)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("PySide6."):
                used.add(".".join((node.module or "").split(".")[:2]))
            elif isinstance(node, ast.Import):
                used.update(".".join(a.name.split(".")[:2]) for a in node.names if a.name.startswith("PySide6."))
    return used


def test_spec_keeps_every_qt_module_kvmon_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    _ns, calls = _exec_spec(monkeypatch)
    excludes = set(calls["Analysis"][0][1]["excludes"])
    used = _qt_modules_kvmon_imports()
    assert "PySide6.QtWidgets" in used
    assert not used & excludes, f"the spec excludes Qt modules kvmon imports: {sorted(used & excludes)}"


def test_spec_filters_binaries_and_translations(monkeypatch: pytest.MonkeyPatch) -> None:
    ns, _calls = _exec_spec(monkeypatch)
    kept = {b[0] for b in ns["a"].binaries}
    assert kept == KEPT_BINARIES
    datas = {d[0] for d in ns["a"].datas}
    assert datas == {"PySide6/Qt/translations/qtbase_de.qm", "pyqtgraph/colors/maps/CET-L1.csv"}


def test_spec_never_strips_or_upx(monkeypatch: pytest.MonkeyPatch) -> None:
    _ns, calls = _exec_spec(monkeypatch)
    for name in ("EXE", "COLLECT"):
        (_args, kw), = calls[name]
        assert kw["strip"] is False and kw["upx"] is False, name
    assert calls["EXE"][0][1]["name"] == "kvmon"
    assert calls["EXE"][0][1]["console"] is True  # Linux: --version / once --json print to the terminal
    assert "BUNDLE" not in calls


def test_spec_macos_bundle_and_windows_icon(monkeypatch: pytest.MonkeyPatch) -> None:
    _ns, calls = _exec_spec(monkeypatch, "darwin")
    (_args, kw), = calls["BUNDLE"]
    assert kw["name"] == "kvmon.app" and kw["bundle_identifier"] == "org.kvmon.kvmon"
    assert Path(kw["icon"]).is_file() and kw["icon"].endswith(".icns")
    assert calls["EXE"][0][1]["console"] is False
    monkeypatch.undo()
    _ns, calls = _exec_spec(monkeypatch, "win32")
    icon = calls["EXE"][0][1]["icon"]
    assert icon.endswith(".ico") and Path(icon).is_file()
    assert "BUNDLE" not in calls
    # the GTK-only library filter applies on Linux only
    assert "libcairo.so.2" in {b[0] for b in _ns["a"].binaries}


def test_spec_app_id_matches_metainfo() -> None:
    text = SPEC.read_text()
    app_id = re.search(r'APP_ID = "([^"]+)"', text)
    assert app_id is not None
    assert f"<id>{app_id.group(1)}</id>" in (ROOT / "resources" / "kvmon.metainfo.xml").read_text()


# --- shell scripts and the other platforms -------------------------------------------------------------


@pytest.mark.parametrize("script", [LINUX / "build-deb.sh", LINUX / "build-and-smoke.sh",
                                    ROOT / "packaging" / "macos" / "build-dmg.sh",
                                    ROOT / "packaging" / "python" / "build-and-smoke.sh",
                                    ROOT / "packaging" / "print-version"])
def test_shell_scripts_parse_and_are_executable(script: Path) -> None:
    assert script.stat().st_mode & 0o111, f"{script.name} is not executable"
    out = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "set -euo pipefail" in script.read_text()


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_shellcheck() -> None:
    scripts = [str(p) for p in (*LINUX.glob("*.sh"), *(ROOT / "packaging" / "macos").glob("*.sh"),
                                *(ROOT / "packaging" / "python").glob("*.sh"), ROOT / "packaging" / "print-version")]
    out = subprocess.run(["shellcheck", "-S", "warning", *scripts], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout


def test_deb_declares_qt_system_libraries_and_fast_compression() -> None:
    text = (LINUX / "build-deb.sh").read_text()
    depends = re.search(r'DEPENDS="(.*?)"', text, re.S)
    assert depends is not None
    names = {d.strip().split()[0] for d in depends.group(1).replace("\n", " ").split(",")}
    for lib in ("libegl1", "libgl1", "libfontconfig1", "libxkbcommon0", "libxkbcommon-x11-0", "libdbus-1-3",
                "libxcb-cursor0", "libxcb-icccm4", "libxcb-keysyms1", "libxcb-image0", "libxcb-randr0",
                "libxcb-render-util0", "libxcb-shape0", "libxcb-xkb1", "fonts-dejavu-core", "libc6"):
        assert lib in names, lib
    assert 'COMPRESS="${COMPRESS:-zstd}"' in text and "xz" not in text
    assert "strip" not in text.replace("--strip", "")  # never strips the bundle
    for path in ("/opt/kvmon", "usr/share/applications/kvmon.desktop", "usr/share/metainfo/",
                 "usr/share/icons/hicolor/scalable/apps", "120 * 1024 * 1024"):
        assert path in text, path


def test_inno_setup_definition() -> None:
    text = (ROOT / "packaging" / "windows" / "kvmon.iss").read_text()
    for needle in ("AppId={{", "AppName=kvmon", "build\\bundle\\kvmon\\*", "recursesubdirs",
                   "SetupIconFile={#Root}\\resources\\icons\\kvmon.ico", "{app}\\kvmon.exe"):
        assert needle in text, needle
    sections = set(re.findall(r"^\[(\w+)\]", text, re.M))
    assert {"Setup", "Files", "Icons"} <= sections


def test_release_workflow_builds_three_platforms() -> None:
    yaml = pytest.importorskip("yaml")
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / "release.yml").read_text())
    jobs = wf["jobs"]
    assert {"linux", "windows", "macos", "release"} <= set(jobs)
    assert jobs["linux"]["container"] == "debian:12"
    runs = {name: " ".join(str(s.get("run", "")) for s in job["steps"]) for name, job in jobs.items()}
    assert "packaging/linux/build-and-smoke.sh" in runs["linux"]
    assert "packaging\\windows\\build.ps1" in runs["windows"]
    assert "packaging/macos/build-dmg.sh" in runs["macos"]
    assert set(jobs["release"]["needs"]) == {"linux", "windows", "macos"}


def test_smoke_checks_every_generated_icon_size() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_icons", ROOT / "packaging" / "make-icons.py")
    assert spec is not None and spec.loader is not None
    make_icons = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_icons)
    loop = re.search(r"for size in ([0-9 ]+); do", (LINUX / "build-and-smoke.sh").read_text())
    assert loop is not None
    assert tuple(int(s) for s in loop.group(1).split()) == make_icons.PNG_SIZES
