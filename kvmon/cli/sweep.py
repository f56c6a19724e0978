"""``kvmon sweep [URL] [--to TOKENS] [--steps N] [--generate K] [--json] [-o FILE.png] [--csv FILE]``: measure decode
and prefill at every depth of the running server, say first what it will cost, and print the seeds' table.

Exit status: 0 measured, 1 stopped early (the server failed a request; what was measured is printed), 2 the server
could not be read, 3 the sweep was refused (past n_ctx, a spill, a reply being generated: the reason is said), 130
cancelled (Ctrl+C: the server's request is cancelled too). The picture needs Qt and is drawn offscreen.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from kvmon.core.sweep import DEFAULT_GENERATE, DEFAULT_STEPS

EXIT_OK, EXIT_STOPPED, EXIT_UNREADABLE, EXIT_REFUSED, EXIT_CANCELLED = 0, 1, 2, 3, 130


def _positive(text: str) -> int:
    try:
        v = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number above 0")
    return v


def add_parser(sub: Any, add_connection_args: Any) -> None:
    """The ``sweep`` subcommand's arguments."""
    p = sub.add_parser("sweep", help="measure decode and prefill at every depth of the running server "
                                     "(what it will cost is said first)")
    add_connection_args(p)
    p.add_argument("--to", type=_positive, default=None, metavar="TOKENS",
                   help="the deepest depth to measure (default: as deep as the server's context allows)")
    p.add_argument("--steps", type=_positive, default=DEFAULT_STEPS, metavar="N",
                   help="depths to measure beyond the empty conversation (default %(default)s)")
    p.add_argument("--generate", type=_positive, default=DEFAULT_GENERATE, metavar="K",
                   help="tokens generated and timed at each depth (default %(default)s)")
    p.add_argument("--model", default=None, metavar="NAME",
                   help="a router's or llama-swap's model to sweep (default: the one loaded); never loads one")
    p.add_argument("--allow-spill", action="store_true",
                   help="sweep even when the KV cache spills out of the device's memory (the spilled curve)")
    p.add_argument("--plan", action="store_true", help="say what the sweep would cost (one short request) and stop")
    p.add_argument("--json", action="store_true", help="print the sweep as JSON (docs/sweep.md)")
    p.add_argument("-o", "--output", default=None, metavar="FILE.png",
                   help="save the speed-vs-context plot with its caption strip")
    p.add_argument("--csv", default=None, metavar="FILE.csv", help="save the table as CSV")
    p.add_argument("--no-atlas", dest="atlas", action="store_false",
                   help="do not remember the measured curve in kvmon's atlas of measured curves")


def _progress_printer(err: TextIO) -> Any:
    """The progress line, where ``err`` is a terminal (None elsewhere: nothing is shown)."""
    if not err.isatty():
        return None

    def show(p: Any) -> None:
        eta = "" if p.eta_s is None else f", about {p.eta_s:.0f} s left"
        err.write(f"\r  {p.phase}: depth {p.depth_tokens:,} of {p.deepest:,} ({p.step}/{p.steps} measured{eta})   ")
        if p.phase == "done":
            err.write("\n")
        err.flush()

    return show


def _open(args: argparse.Namespace, api_key: str | None, err: TextIO) -> tuple[Any, Any] | int:
    """(monitor, snapshot after two polls) or an exit status."""
    from kvmon.app.build import open_monitor
    from kvmon.app.session import settings_from_args
    from kvmon.core.readings import SourceError

    try:
        monitor = open_monitor(args.url, api_key=api_key, timeout_s=args.timeout, log_path=args.log,
                               devices_url=args.devices, settings=settings_from_args(args))
    except SourceError as e:
        print(f"kvmon: {e.failure.reason}", file=err)
        return EXIT_UNREADABLE
    if args.model and hasattr(monitor, "follow"):
        monitor.follow(args.model)
    snap = monitor.poll()
    time.sleep(0.5)
    snap = monitor.poll()
    if not snap.server_read:
        monitor.close()
        print(f"kvmon: {snap.connection.reason or snap.connection.status.value}", file=err)
        return EXIT_UNREADABLE
    if args.model and snap.serving is not None and snap.serving.followed != args.model:
        monitor.close()
        print(f"kvmon: {args.model} is not loaded on {snap.url} (a sweep never loads a model)", file=err)
        return EXIT_REFUSED
    return monitor, snap


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Plan, say the cost, sweep, print; returns the exit status."""
    from kvmon.app.atlas import remember_sweep
    from kvmon.app.sweep import DepthSweep, target_for
    from kvmon.core.sweep import SweepFailed, plan_sweep
    from kvmon.core.sweep_table import summary_lines, to_csv, to_json
    from kvmon.core.units import fmt_duration
    from kvmon.sources.backends import by_name

    out, err = out or sys.stdout, err or sys.stderr
    api_key = args.api_key or os.environ.get("KVMON_API_KEY") or None
    opened = _open(args, api_key, err)
    if isinstance(opened, int):
        return opened
    monitor, snap = opened
    say = err if args.json else out
    try:
        backend = by_name(str(snap.backend) if snap.backend else None)
        plan = plan_sweep(snap, backend, args.to, args.steps, args.generate, allow_spill=args.allow_spill)
        if plan.refusal:
            print(f"kvmon: sweep refused: {plan.refusal}", file=err)
            return EXIT_REFUSED
        try:
            target = target_for(monitor, snap, api_key)
        except SweepFailed as e:
            print(f"kvmon: sweep refused: {e}", file=err)
            return EXIT_REFUSED
        print(f"Sweeping {snap.model.name or 'the model'} on {target.display_url}:", file=say)
        for line in plan.cost_lines():
            print(f"  {line}", file=say)
        sweep = DepthSweep(target, plan, snap, on_progress=_progress_printer(err))
        try:
            secs = sweep.calibrate()
        except SweepFailed as e:
            target.close()
            print(f"kvmon: sweep failed before it began: {e}", file=err)
            return EXIT_STOPPED
        if secs is not None:
            print(f"  {fmt_duration(secs)} at the prefill rate measured first ({sweep.prefill_tok_s:,.0f} tok/s; "
                  "deeper prompts read slower)", file=say)
        if args.plan:
            target.close()
            return EXIT_OK
        result = _run_cancellable(sweep, err)
    finally:
        monitor.close()
    if args.atlas and (problem := remember_sweep(result)):
        print(f"kvmon: the measured curve was not remembered: {problem}", file=err)
    if args.json:
        out.write(json.dumps(to_json(result), indent=2, ensure_ascii=False) + "\n")
    else:
        out.write("\n".join(summary_lines(result)) + "\n")
    if args.csv:
        Path(args.csv).write_text(to_csv(result), encoding="utf-8")
    if args.output:
        from kvmon.gui.curves_plot import save_png, sweep_caption

        save_png(args.output, sweep_caption(result, snap), lambda plot: plot.show_sweep(result))
    return {"done": EXIT_OK, "cancelled": EXIT_CANCELLED}.get(result.outcome, EXIT_STOPPED)


def _run_cancellable(sweep: Any, err: TextIO) -> Any:
    """Run the sweep on a thread so that Ctrl+C cancels it cleanly (the server's request too)."""
    box: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: box.setdefault("result", sweep.run()), name="kvmon-sweep", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.2)
    except KeyboardInterrupt:
        print("\nkvmon: cancelling the sweep", file=err)
        sweep.cancel()
        worker.join()
    return box["result"]
