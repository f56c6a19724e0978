"""The test of a module is found by its path: ``tests/sources/llamacpp/test_source.py`` beside
``kvmon/sources/llamacpp/source.py``. Stories, hostile input and real-server suites live in ``tests/acceptance/``;
tests of the project as a whole (packaging, resources, the house rules) stay at the top of ``tests/``."""

from __future__ import annotations

from pathlib import Path

from repo_paths import ROOT, TESTS

PACKAGE = ROOT / "kvmon"
# The share of kvmon's modules with a test at the mirrored path (90.4% now, 207 of 229); it only goes up. A module
# with behaviour of its own and no mirrored test yet is the next one to give one.
MIRRORED_SHARE_FLOOR = 0.90
# Folders of tests that are not a package of kvmon.
NOT_A_PACKAGE = {"acceptance", "fixtures"}


def modules() -> list[Path]:
    """Every module of kvmon, as a path relative to the package (packages' __init__ and __main__ left out)."""
    return sorted(p.relative_to(PACKAGE) for p in PACKAGE.rglob("*.py")
                  if p.name not in ("__init__.py", "__main__.py"))


def mirrored_test(module: Path) -> Path:
    return TESTS / module.parent / f"test_{module.name}"


def test_most_modules_have_a_test_at_the_mirrored_path() -> None:
    mods = modules()
    missing = [m for m in mods if not mirrored_test(m).exists()]
    share = 1 - len(missing) / len(mods)
    assert share >= MIRRORED_SHARE_FLOOR, (
        f"{share:.1%} of {len(mods)} modules have a test at the mirrored path (at least {MIRRORED_SHARE_FLOOR:.0%} "
        f"should); without one: {', '.join(str(m) for m in missing)}")


def test_every_folder_of_tests_mirrors_a_package_of_kvmon() -> None:
    """A test folder with no package behind it (a typo, a package renamed) hides its tests from whoever looks for
    them by the module's path."""
    strays = []
    for folder in TESTS.rglob("*"):
        rel = folder.relative_to(TESTS)
        if not folder.is_dir() or rel.parts[0] in NOT_A_PACKAGE or "__pycache__" in rel.parts:
            continue
        if not (PACKAGE / rel).is_dir():
            strays.append(str(rel))
    assert not strays, f"test folders with no package of kvmon behind them: {strays}"


def test_no_test_folder_is_a_package() -> None:
    """pytest imports test files by path (importlib mode): an __init__.py would make basenames clash again."""
    assert not [str(p.relative_to(TESTS)) for p in TESTS.rglob("__init__.py") if "fixtures" not in p.parts]
