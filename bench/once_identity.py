"""The ``once --json`` documents of a simulated session on a stopped clock, one JSON line per poll.

The simulator's clock never runs by itself here: it starts at ``--start-at`` simulated seconds and moves only
by ``--step`` between polls, and every reading is stamped with it, so the same kvmon gives the same documents
on every run. Two trees (a branch and the commit it started from) driven by this script with their own Python
give documents that must be equal line by line when a change is meant to keep behaviour:

    python bench/once_identity.py --out new.jsonl
    <the other tree's python> bench/once_identity.py --out base.jsonl     # the same script, the other kvmon
    cmp base.jsonl new.jsonl
    python bench/once_identity.py --compare base.jsonl new.jsonl  # which lines and which keys differ, if any

The kvmon imported is the one the running Python finds (an editable install's tree, or ``PYTHONPATH``). Fields
that follow the machine or the wall clock rather than the simulation (``t_wall``, the regime's start, when the
last speed was measured, this machine's RAM, when its bandwidth was measured, this process's RSS) are left out,
and the server's port, pid and model folder (new on every run) are written as PORT, PID and SIMDIR. The simulated
Ollama's model server is a real child process, so a few of its documents differ from run to run by when that child
answered.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any

# (scenario, faults, simulated start, polls, simulated seconds between polls): chats, a restart and garbage
# bodies, another application filling VRAM until the model reloads partly offloaded, Ollama with part in RAM
CASES: tuple[tuple[str, tuple[str, ...], float, int, float], ...] = (
    ("seed-3090x2", (), 30.0, 120, 0.5),
    ("seed-3090x2", ("restart:4@50", "garbage:3@70"), 40.0, 80, 0.5),
    ("spill-4090", (), 280.0, 100, 1.0),
    ("ollama-partial", (), 30.0, 60, 1.0),
)
MACHINE_FIELDS = ("ram_total_bytes", "ram_available_bytes", "server_rss_bytes", "host_bandwidth_measured_at_unix_s")
SIM_DIR = re.compile(r"/[^\"]*?kvmon-sim-[A-Za-z0-9_]+/")  # the simulator's model files, in a new folder each run


def _demo_session(scenario: str, faults: tuple[str, ...], start_at_s: float) -> Any:
    """The demo session of this tree (``kvmon.app.demo``; before it ``kvmon.session``, then ``kvmon.gui.app``)."""
    try:
        from kvmon.app.demo import demo_session
    except ImportError:
        try:
            from kvmon.session import demo_session  # type: ignore[no-redef]
        except ImportError:
            from kvmon.gui.app import demo_session  # type: ignore[no-redef]
    return demo_session(scenario, None, faults=faults, start_at_s=start_at_s)


def documents(scenario: str, faults: tuple[str, ...], start_at_s: float, polls: int,
              step_s: float) -> list[dict[str, Any]]:
    """``polls`` documents of ``scenario``, the clock moved ``step_s`` simulated seconds between them."""
    from kvmon.core.report_json import snapshot_to_json
    from kvmon.sim.clock import SimClock

    real_start = SimClock.start
    SimClock.start = lambda self: None  # type: ignore[method-assign]  # the clock moves only by advance()
    try:
        session = _demo_session(scenario, faults, start_at_s)
    finally:
        SimClock.start = real_start  # type: ignore[method-assign]
    docs: list[dict[str, Any]] = []
    try:
        monitor = session.factory()
        try:
            for i in range(polls):
                if i:
                    session.sim.clock.advance(step_s)
                session.sim.refresh_gpus()
                doc = snapshot_to_json(monitor.poll())
                doc.pop("t_wall", None)
                for key in MACHINE_FIELDS:
                    doc["host"].pop(key, None)
                doc["forecast"]["regime"].pop("since_t_wall", None)  # the wall clock when the regime began
                for key in ("last_decode", "decode_before"):  # when that speed was measured, by the wall clock
                    if doc.get(key):
                        doc[key].pop("t_wall", None)
                docs.append({"scenario": scenario, "faults": list(faults), "poll": i, "doc": doc})
        finally:
            monitor.close()
    finally:
        session.close()
    return docs


def _diff(a: Any, b: Any, path: str, out: list[str]) -> None:
    """The paths where two JSON values differ (a key only one side has counts as a difference)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            _diff(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{path}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for x, y in zip(a, b, strict=True):
            _diff(x, y, f"{path}[]", out)
    elif a != b:
        out.append(path)


def compare(base_path: str, new_path: str, ignore: tuple[str, ...] = ()) -> int:
    """Lines byte-identical, equal but for key order, and the keys where the others differ (with a count);
    ``ignore``: top-level document keys the new tree adds on purpose, left out of the comparison."""
    with open(base_path, encoding="utf-8") as f:
        base = f.read().splitlines()
    with open(new_path, encoding="utf-8") as f:
        new = f.read().splitlines()
    if len(base) != len(new):
        print(f"{len(base)} lines against {len(new)}: not the same cases")
        return 1
    same = reordered = 0
    paths: dict[str, int] = {}
    for a, b in zip(base, new, strict=True):
        if a == b:
            same += 1
            continue
        found: list[str] = []
        da, db = json.loads(a), json.loads(b)
        for key in ignore:
            da["doc"].pop(key, None)
            db["doc"].pop(key, None)
        _diff(da, db, "", found)
        if not found:
            reordered += 1
        for p in set(found):
            paths[p] = paths.get(p, 0) + 1
    print(f"{len(base)} documents: {same} byte-identical, {reordered} equal but for key order, "
          f"{len(base) - same - reordered} with values that differ")
    for p, n in sorted(paths.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {n:4d}  {p}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="-", help="file to write (default: stdout)")
    ap.add_argument("--compare", nargs=2, metavar=("BASE", "NEW"), help="compare two files this script wrote")
    ap.add_argument("--ignore", action="append", default=[], metavar="KEY",
                    help="with --compare: a top-level key the new tree adds on purpose (repeatable)")
    args = ap.parse_args()
    if args.compare:
        return compare(*args.compare, ignore=tuple(args.ignore))
    lines = []
    for case in CASES:
        for d in documents(*case):
            text = json.dumps(d, allow_nan=False)  # key order as once --json writes it
            port = d["doc"]["url"].rsplit(":", 1)[-1] if d["doc"]["url"] else None
            if port:  # a free port, chosen anew on every run
                text = text.replace(f"127.0.0.1:{port}", "127.0.0.1:PORT").replace(f"port {port}", "port PORT")
            text = text.replace(f"pid {os.getpid()})", "pid PID)")  # the in-process server's pid
            text = SIM_DIR.sub("SIMDIR/", text)
            lines.append(text)
    text = "\n".join(lines) + "\n"
    if args.out == "-":
        sys.stdout.write(text)
    else:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
