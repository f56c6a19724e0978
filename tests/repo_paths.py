"""Where things are in the checkout, for tests at any depth under ``tests/``: the root, the fixtures, the benches."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
FIXTURES = TESTS / "fixtures"
BENCH = ROOT / "bench"
