"""House rules that hold for the whole package: layering and the command line's cheap paths."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = ("PySide6", "PyQt5", "PyQt6", "pyqtgraph", "httpx", "pynvml", "shiboken6")


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def _offenders(package: str, banned: Callable[[str], bool]) -> list[str]:
    """Every import in kvmon/<package> that ``banned`` refuses, as "file imports name"."""
    files = sorted((ROOT / "kvmon" / package).rglob("*.py"))
    assert files, f"kvmon/{package} has no modules"
    return [f"{f.relative_to(ROOT)} imports {name}" for f in files for name in _imports(f) if banned(name)]


@pytest.mark.parametrize("package", ["physics", "core"])
def test_pure_packages_import_no_qt_httpx_or_nvml(package: str) -> None:
    offenders = _offenders(package, lambda name: name.split(".")[0] in FORBIDDEN)
    assert not offenders, "\n".join(offenders)


# package -> the kvmon packages it must not import: the GUI renders Snapshots (the session builds its sources),
# the simulator stands in for servers and GPUs (it must not lean on the code that reads them), and the proxy
# serves the stats document that the sources read (never the other way round).
LAYERS = {
    "gui": ("kvmon.sources", "kvmon.sim"),
    "sim": ("kvmon.sources",),
    "proxy": ("kvmon.sources",),
    "physics": ("kvmon.core", "kvmon.sources", "kvmon.sim", "kvmon.gui", "kvmon.proxy"),
    "core": ("kvmon.sources", "kvmon.sim", "kvmon.gui", "kvmon.proxy"),
}


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_packages_keep_to_their_layer(package: str) -> None:
    offenders = _offenders(package, lambda name: any(name == b or name.startswith(b + ".") for b in LAYERS[package]))
    assert not offenders, "\n".join(offenders)


def test_no_relative_imports_hide_from_these_rules() -> None:
    relative = [str(f.relative_to(ROOT)) for f in sorted((ROOT / "kvmon").rglob("*.py"))
                if any(isinstance(n, ast.ImportFrom) and n.level
                       for n in ast.walk(ast.parse(f.read_text(encoding="utf-8"))))]
    assert not relative, relative


def test_version_is_fast_and_loads_no_qt() -> None:
    code = (
        "import sys; from kvmon.cli import main\n"
        "try:\n    main(['--version'])\nexcept SystemExit as e:\n    assert e.code == 0\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('PySide6', 'pyqtgraph', 'httpx', 'pynvml')]\n"
        "assert not bad, bad\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith("kvmon ")
