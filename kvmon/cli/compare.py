"""``kvmon compare A B [-o FILE.png] [--csv FILE]``: two measured curves on one speed-vs-context plot."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("compare", help="two sweeps, recordings or remembered curves on one plot")
    p.add_argument("a")
    p.add_argument("b")


def run(args: argparse.Namespace) -> int:
    return 2
