"""The hostile matrix in full: every way a server can hang (hang, slow headers, a trickled body, a server that
accepts and stalls) on every endpoint of every backend kvmon reads, each against ``kvmon once URL --timeout T``
(``tests/hostile_matrix.py``); prints the slowest case per endpoint (and the slowest with only that endpoint
hanging, the rest of the server answering), and counts the cases over the bound 2 × T + interval + 1 s. Exit
status 1 when a case is over it or ends in a traceback.

Usage: python bench/hostile_matrix.py [--timeout 3] [--interval 1] [--backend ollama ...] [--kvmon CHECKOUT]
(``--kvmon``: measure another checkout's kvmon, e.g. before a change, with this one's cases)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--timeout", type=float, default=3.0, help="kvmon once --timeout (default: its own, 3 s)")
    p.add_argument("--interval", type=float, default=1.0, help="kvmon once --interval (default: its own, 1 s)")
    p.add_argument("--backend", action="append", default=None, help="only this backend (repeatable)")
    p.add_argument("--workers", type=int, default=12, help="cases at a time (each mostly waits on sockets)")
    p.add_argument("--kvmon", default=None, metavar="CHECKOUT", help="import kvmon from this checkout")
    args = p.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    sys.path.insert(0, str(Path(args.kvmon).resolve() if args.kvmon else ROOT))
    from hostile_matrix import BACKENDS, bound_s, cases, run_cases

    import kvmon

    todo = list(cases(args.backend))
    limit = bound_s(args.timeout, args.interval)
    print(f"kvmon {kvmon.__version__} from {Path(kvmon.__file__).parent.parent}: {len(todo)} cases, "
          f"--timeout {args.timeout:g} --interval {args.interval:g}, bound {limit:.1f} s", flush=True)
    t0 = time.monotonic()
    results = run_cases(todo, timeout_s=args.timeout, interval_s=args.interval, workers=args.workers)
    wall = time.monotonic() - t0
    print(f"\n{'backend':15s} {'endpoint':22s} {'slowest':>8s}  {'mode':13s} exit  {'one hangs':>9s} exit  "
          "what once said in the slowest")
    for backend in args.backend or list(BACKENDS):
        for endpoint in BACKENDS[backend].endpoints:
            mine = [r for r in results if (r.backend, r.endpoint) == (backend, endpoint)]
            worst = max(mine, key=lambda r: r.elapsed_s)
            alone = max((r for r in mine if r.mode != "accept_stall"), key=lambda r: r.elapsed_s)  # the rest answers
            flag = " OVER" if worst.elapsed_s > limit else ""
            print(f"{backend:15s} {endpoint:22s} {worst.elapsed_s:7.2f}s  {worst.mode:13s} {worst.rc!s:>4s}  "
                  f"{alone.elapsed_s:8.2f}s {alone.rc!s:>4s}  {worst.first_line[:60]}{flag}")
    over = [r for r in results if r.elapsed_s > limit]
    broken = [r for r in results if r.error is not None or r.rc not in (0, 2)]
    read = sum(r.rc == 0 for r in results)
    print(f"\n{len(results)} cases in {wall:.1f} s; slowest {max(r.elapsed_s for r in results):.2f} s; "
          f"{len(over)} over {limit:.1f} s; {read} read (exit 0), {len(results) - read - len(broken)} not (exit 2); "
          f"{len(broken)} with a traceback or an odd exit status")
    for r in broken[:5]:
        print(f"--- {r.backend} {r.endpoint} {r.mode}\n{(r.error or r.stderr)[-1500:]}")
    return 1 if over or broken else 0


if __name__ == "__main__":
    sys.exit(main())
