"""``kvmon compare A B [-o FILE.png] [--csv FILE]``: two measured curves on one speed-vs-context plot, each named by
what differs between them ("KV q8_0 vs f16"), with both ceilings and the table of both at their common depths.

A and B are each a sweep's JSON (``kvmon sweep --json``), a recording (``.jsonl``) or ``atlas:N`` (a configuration
of the atlas of measured curves: ``kvmon compare --list``). Exit status 0, or 2 with the reason when a curve cannot
be read or a file written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, TextIO


def add_parser(sub: Any) -> None:
    """The ``compare`` subcommand's arguments."""
    p = sub.add_parser("compare", help="two sweeps, recordings or remembered curves on one plot")
    p.add_argument("curves", nargs="*", metavar="A B",
                   help="a sweep's .json, a recording's .jsonl, or atlas:N (see --list)")
    p.add_argument("--list", action="store_true", help="list the configurations the atlas of measured curves holds")
    p.add_argument("-o", "--output", default=None, metavar="FILE.png", help="save the plot with its caption strip")
    p.add_argument("--csv", default=None, metavar="FILE.csv", help="save the table of both at the common depths")


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    from kvmon.app.compare import CompareError, atlas_lines, load_curve
    from kvmon.core.compare import common_rows, named, table_lines, to_csv
    from kvmon.sources.backends import by_name

    out, err = out or sys.stdout, err or sys.stderr
    try:
        if args.list:
            out.write("\n".join(atlas_lines()) + "\n")
            return 0
        if len(args.curves) != 2:
            print("kvmon: compare takes two curves: A B (a sweep's .json, a recording's .jsonl, or atlas:N)", file=err)
            return 2
        a, b = (load_curve(spec) for spec in args.curves)
    except CompareError as exc:
        print(f"kvmon: {exc}", file=err)
        return 2
    a, b, title = named(a, b, by_name)
    rows = common_rows(a, b)
    table = table_lines(a, b, rows) if rows else ["the two curves share no depths"]
    out.write("\n".join([title, *table]) + "\n")
    try:
        if args.csv:
            Path(args.csv).write_text(to_csv(a, b, rows), encoding="utf-8")
        if args.output:
            from kvmon import __version__
            from kvmon.gui.curves_plot import save_png

            caption = " · ".join(x for x in (title, f"{a.label}: {a.source}", f"{b.label}: {b.source}",
                                             a.model if a.model == b.model else None, f"kvmon {__version__}") if x)
            save_png(args.output, caption, lambda plot: plot.show_curves([a, b], title, table))
    except OSError as exc:
        print(f"kvmon: {exc}", file=err)
        return 2
    return 0
