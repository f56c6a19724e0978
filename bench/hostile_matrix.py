"""The hostile matrix in full, by mode (``--mode``, default all):

- ``hang``: every way a server can hang (hang, slow headers, a trickled body, a server that accepts and stalls, an
  answer dropped mid-body) on every endpoint of every backend kvmon reads, each against ``kvmon once URL --timeout
  T`` (``tests/hostile_matrix.py``); prints the slowest case per endpoint (and the slowest with only that endpoint
  failing, the rest of the server answering), and counts the cases over the bound 2 × T + interval + 1 s;
- ``every-path-fails``: every backend read while it answers, then every path of its server answering 502, 500,
  404, an HTML page, invalid JSON, an empty body or a redirect (a gateway whose server died): each must be a
  failure (``kvmon_up`` 0), within one timeout per poll; and ``kvmon once`` against such a server from the start
  must exit 2 with one line;
- ``slow-client``: ``kvmon serve`` while 8 connections trickle a byte a second, 40 say nothing, and 200 of both
  (from other addresses): every honest scrape answered within 100 ms (``tests/hostile_clients.py``);
- ``idle-connection``: ``kvmon proxy`` under a descriptor limit of 1024 while 2,000 connections that never send a
  byte are made: every honest request answered within 1 s, and at most a few lines on stderr.

Exit status 1 when a case is over its bound or ends in a traceback.

Usage: python bench/hostile_matrix.py [--mode hang|every-path-fails|slow-client|idle-connection] [--timeout 3]
       [--interval 1] [--backend ollama ...] [--kvmon CHECKOUT] [--seconds 15]
(``--kvmon``: measure another checkout's kvmon, e.g. before a change, with this one's cases)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = ("hang", "every-path-fails", "slow-client", "idle-connection")
SLOW_CLIENT_BOUND_S = 0.1
IDLE_CONNECTION_BOUND_S = 1.0


def hang(args: argparse.Namespace) -> bool:
    from hostile_matrix import BACKENDS, bound_s, cases, run_cases

    todo = list(cases(args.backend))
    limit = bound_s(args.timeout, args.interval)
    print(f"hang: {len(todo)} cases, --timeout {args.timeout:g} --interval {args.interval:g}, bound {limit:.1f} s",
          flush=True)
    t0 = time.monotonic()
    results = run_cases(todo, timeout_s=args.timeout, interval_s=args.interval, workers=args.workers)
    wall = time.monotonic() - t0
    print(f"\n{'backend':15s} {'endpoint':22s} {'slowest':>8s}  {'mode':15s} exit  {'one fails':>9s} exit  "
          "what once said in the slowest")
    for backend in args.backend or list(BACKENDS):
        for endpoint in BACKENDS[backend].endpoints:
            mine = [r for r in results if (r.backend, r.endpoint) == (backend, endpoint)]
            worst = max(mine, key=lambda r: r.elapsed_s)
            alone = max((r for r in mine if r.mode != "accept_stall"), key=lambda r: r.elapsed_s)  # the rest answers
            flag = " OVER" if worst.elapsed_s > limit else ""
            print(f"{backend:15s} {endpoint:22s} {worst.elapsed_s:7.2f}s  {worst.mode:15s} {worst.rc!s:>4s}  "
                  f"{alone.elapsed_s:8.2f}s {alone.rc!s:>4s}  {worst.first_line[:60]}{flag}")
    over = [r for r in results if r.elapsed_s > limit]
    broken = [r for r in results if r.error is not None or r.rc not in (0, 2)]
    read = sum(r.rc == 0 for r in results)
    print(f"\n{len(results)} cases in {wall:.1f} s; slowest {max(r.elapsed_s for r in results):.2f} s; "
          f"{len(over)} over {limit:.1f} s; {read} read (exit 0), {len(results) - read - len(broken)} not (exit 2); "
          f"{len(broken)} with a traceback or an odd exit status")
    for r in broken[:5]:
        print(f"--- {r.backend} {r.endpoint} {r.mode}\n{(r.error or r.stderr)[-1500:]}")
    return not over and not broken


def every_path_fails(args: argparse.Namespace) -> bool:
    from hostile_matrix import FAIL_BACKENDS, FAILURES, run_fail_case, run_fail_once

    bound = 2 * args.timeout + 1.0  # two polls, each within its timeout
    print(f"\nevery-path-fails: {len(FAIL_BACKENDS)} backends x {len(FAILURES)} answers, two polls each within "
          f"{bound:.1f} s; then kvmon once against each from the start", flush=True)
    ok = True
    for backend in args.backend or FAIL_BACKENDS:
        if backend not in FAIL_BACKENDS:
            continue
        for failure in FAILURES:
            r = run_fail_case(backend, failure, timeout_s=args.timeout)
            good = r.error is None and r.healthy_read and not r.read and r.elapsed_s <= bound
            ok &= good
            print(f"  {backend:13s} {failure:13s} {'ok ' if good else 'BAD'} {r.status or '-':13s} "
                  f"{r.elapsed_s:5.2f}s  {(r.error or r.reason)[-90:]}")
    for failure in FAILURES:
        r = run_fail_once(failure, timeout_s=args.timeout, interval_s=args.interval)
        lines = r.stderr.strip().splitlines()
        good = r.error is None and r.rc == 2 and len(lines) == 1
        ok &= good
        print(f"  once          {failure:13s} {'ok ' if good else 'BAD'} exit {r.rc}  {r.elapsed_s:5.2f}s  "
              f"{(r.error or r.first_line)[-110:]}")
    return ok


def slow_client(args: argparse.Namespace) -> bool:
    from hostile_clients import slow_client_probe

    print(f"\nslow-client: kvmon serve, honest scrapes every 0.2 s for {args.seconds:g} s; bound "
          f"{SLOW_CLIENT_BOUND_S * 1000:.0f} ms, none failed", flush=True)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for slow, silent in ((8, 0), (0, 40), (100, 100)):
            r = slow_client_probe(slow=slow, silent=silent, seconds=args.seconds, checkout=args.checkout,
                                  tmp=Path(tmp))
            good = not r.timings.failures and (r.timings.worst_s or 99) <= SLOW_CLIENT_BOUND_S and r.alive
            ok &= good
            print(f"  {'ok ' if good else 'BAD'} {r.line()}", flush=True)
    return ok


def idle_connection(args: argparse.Namespace) -> bool:
    from hostile_clients import idle_connection_probe

    print(f"\nidle-connection: kvmon proxy, honest requests every 0.2 s for {args.seconds:g} s; bound "
          f"{IDLE_CONNECTION_BOUND_S:g} s, none failed, stderr at most a line a second", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        r = idle_connection_probe(attempts=2000, fd_limit=1024, seconds=args.seconds, checkout=args.checkout,
                                  tmp=Path(tmp))
    good = (not r.timings.failures and (r.timings.worst_s or 99) <= IDLE_CONNECTION_BOUND_S and r.alive
            and r.stderr_lines <= args.seconds + 5)
    print(f"  {'ok ' if good else 'BAD'} {r.line()}", flush=True)
    return good


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", action="append", choices=MODES, default=None, help="only this mode (repeatable)")
    p.add_argument("--timeout", type=float, default=3.0, help="kvmon once --timeout (default: its own, 3 s)")
    p.add_argument("--interval", type=float, default=1.0, help="kvmon once --interval (default: its own, 1 s)")
    p.add_argument("--backend", action="append", default=None, help="only this backend (repeatable)")
    p.add_argument("--workers", type=int, default=12, help="hang cases at a time (each mostly waits on sockets)")
    p.add_argument("--seconds", type=float, default=15.0, help="how long the honest client of a probe asks")
    p.add_argument("--kvmon", default=None, metavar="CHECKOUT", help="import kvmon from this checkout")
    args = p.parse_args()
    args.checkout = Path(args.kvmon).resolve() if args.kvmon else None
    sys.path.insert(0, str(ROOT / "tests"))
    sys.path.insert(0, str(args.checkout or ROOT))
    import kvmon

    print(f"kvmon {kvmon.__version__} from {Path(kvmon.__file__).parent.parent}", flush=True)
    runs = {"hang": hang, "every-path-fails": every_path_fails, "slow-client": slow_client,
            "idle-connection": idle_connection}
    verdicts = {m: runs[m](args) for m in (args.mode or MODES)}
    print("\n" + ", ".join(f"{m}: {'within its bounds' if v else 'OVER its bounds'}" for m, v in verdicts.items()))
    return 0 if all(verdicts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
