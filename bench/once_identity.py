"""The ``once --json`` documents of a simulated session on a stopped clock, one JSON line per poll.

The simulator's clock never runs by itself here: it starts at ``--start-at`` simulated seconds and moves only
by ``--step`` between polls, and every reading is stamped with it, so the same kvmon gives the same documents
on every run. Two trees (a branch and the commit it started from) driven by this script with their own Python
give documents that must be equal line by line when a change is meant to keep behaviour:

    python bench/once_identity.py --out new.jsonl
    <the other tree's python> bench/once_identity.py --out base.jsonl     # the same script, the other kvmon
    cmp base.jsonl new.jsonl

The kvmon imported is the one the running Python finds (an editable install's tree). Fields that follow the
machine rather than the simulation (``t_wall``, this machine's RAM, this process's RSS) are left out, and the
server's port and pid (new on every run) are written as PORT and PID.
"""

from __future__ import annotations

import argparse
import json
import os
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
MACHINE_FIELDS = ("ram_total_bytes", "ram_available_bytes", "server_rss_bytes")


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
                docs.append({"scenario": scenario, "faults": list(faults), "poll": i, "doc": doc})
        finally:
            monitor.close()
    finally:
        session.close()
    return docs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="-", help="file to write (default: stdout)")
    args = ap.parse_args()
    lines = []
    for case in CASES:
        for d in documents(*case):
            text = json.dumps(d, allow_nan=False)  # key order as once --json writes it
            port = d["doc"]["url"].rsplit(":", 1)[-1] if d["doc"]["url"] else None
            if port:  # a free port, chosen anew on every run
                text = text.replace(f"127.0.0.1:{port}", "127.0.0.1:PORT").replace(f"port {port}", "port PORT")
            text = text.replace(f"pid {os.getpid()})", "pid PID)")  # the in-process server's pid
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
