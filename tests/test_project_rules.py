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
    """Every module a file imports, at any depth (inside functions too), ``from kvmon import x`` as ``kvmon.x``, and
    the modules named to ``lazy_import`` / ``import_module``: none of them escapes the layer rules."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            if node.module == "kvmon":
                names.extend(f"kvmon.{alias.name}" for alias in node.names if not alias.name.startswith("__"))
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and getattr(node.func, "id", getattr(node.func, "attr", None)) in ("lazy_import", "import_module")):
            names.append(node.args[0].value)
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


def _under(name: str, *packages: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


# package -> what it must not import. The GUI renders Snapshots: it may reach only the wiring (app), core, physics
# and its own resources, never a source, the simulator or a command. The wiring is below the GUI and the commands.
# The sources read servers and devices: never the wiring, the GUI, the simulator or the proxy's insides (only the
# stats document it publishes, ``kvmon.proxy.stats``). The simulator stands in for servers and GPUs without leaning
# on the code that reads them; the proxy serves its stats document to the sources, never the other way round.
_GUI_MAY = ("kvmon.app", "kvmon.core", "kvmon.physics", "kvmon.gui", "kvmon.resources")
LAYERS: dict[str, Callable[[str], bool]] = {
    "gui": lambda n: _under(n, "kvmon") and n != "kvmon" and not _under(n, *_GUI_MAY),
    "app": lambda n: _under(n, "kvmon.gui", "kvmon.cli"),
    "sources": lambda n: _under(n, "kvmon.app", "kvmon.cli", "kvmon.gui", "kvmon.sim")
    or (_under(n, "kvmon.proxy") and not _under(n, "kvmon.proxy.stats")),
    "sim": lambda n: _under(n, "kvmon.sources", "kvmon.app", "kvmon.cli", "kvmon.gui"),
    "proxy": lambda n: _under(n, "kvmon.sources", "kvmon.app", "kvmon.cli", "kvmon.gui", "kvmon.sim"),
    "physics": lambda n: _under(n, "kvmon.core", "kvmon.sources", "kvmon.sim", "kvmon.gui", "kvmon.proxy",
                                "kvmon.app", "kvmon.cli"),
    "core": lambda n: _under(n, "kvmon.sources", "kvmon.sim", "kvmon.gui", "kvmon.proxy", "kvmon.app", "kvmon.cli"),
}


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_packages_keep_to_their_layer(package: str) -> None:
    offenders = _offenders(package, LAYERS[package])
    assert not offenders, "\n".join(offenders)


def test_the_layer_rules_see_imports_inside_functions_and_lazy_ones(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from kvmon.sim import fake_nvml\n    from kvmon import sources\n"
                 "    return lazy_import('kvmon.cli.once')\n", encoding="utf-8")
    names = _imports(f)
    assert {"kvmon.sim", "kvmon.sources", "kvmon.cli.once"} <= set(names)
    assert all(LAYERS["gui"](n) for n in ("kvmon.sim", "kvmon.sources", "kvmon.cli.once"))
    assert not any(LAYERS["gui"](n) for n in ("kvmon.app.store", "kvmon.core.snapshot", "kvmon", "numpy"))
    assert LAYERS["sources"]("kvmon.proxy.server") and not LAYERS["sources"]("kvmon.proxy.stats")


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
