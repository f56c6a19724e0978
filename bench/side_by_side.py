"""kvmon's dashboard beside llamastat on the same real llama-server: CPU per minute of each, in interleaved rounds.

A real llama.cpp server (b11549, the ``xllamacpp`` wheel the tests use, a tiny random-weight llama GGUF, one
thread) generates without pause; each round runs kvmon's dashboard (offscreen) and then llamastat (its terminal UI
on a pseudo-terminal), each polling at 1 Hz, and measures the process's CPU seconds over ``--seconds`` after
``--warmup``. kvmon's time is also split by thread (the GUI thread and the rest: poller and sources). Then
``kvmon serve`` over the same window, a bare PySide6 + pyqtgraph window that only repaints what a poll changes
(``bench/bare_window.py``: the floor under any Qt dashboard of this kind), and ``kvmon once`` per call. Prints
the figures, the ratio and the budgets; exit status 1 when one is over it.

    pip install -e '.[test,bench]'   # llamastat comes with the bench extra
    python bench/side_by_side.py [--seconds 45] [--warmup 15] [--rounds 2]

Budget: the dashboard ≤ 1.4 × the floor measured in the same run (the bare window plus ``kvmon serve``: what any
dashboard of this stack costs before it draws a figure of its own); its ratio to llamastat is printed beside.
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import json
import os
import pty
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the real-server fixture and the tiny GGUFs of the tests

BUDGET_OVER_FLOOR = 1.4
PROMPT = "The memory bus decides how fast a model can decode, because every token reads "


class Generator:
    """Keeps the server generating: one completion after another, until stopped."""

    def __init__(self, url: str) -> None:
        self.url, self.replies, self.tokens = url, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="generator", daemon=True)

    def start(self) -> Generator:
        self._thread.start()
        return self

    def _run(self) -> None:
        with httpx.Client(timeout=120.0) as c:
            while not self._stop.is_set():
                try:
                    r = c.post(f"{self.url}/completion", json={"prompt": PROMPT, "n_predict": 1024,
                                                               "temperature": 1.0, "cache_prompt": False})
                    self.tokens += int(r.json().get("tokens_predicted") or 0)
                    self.replies += 1
                except (httpx.HTTPError, ValueError):
                    time.sleep(0.2)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=130)


@contextmanager
def busy_server(prefix: str) -> Iterator[tuple[Path, str, Generator]]:
    """The real llama-server of the tests (a tiny llama, ``-c 4096 --metrics``) generating without pause, for the
    benches that measure kvmon beside a busy server: (a work folder, its URL, the generator); stopped on exit."""
    from real_llama_server import RealLlamaServer
    from tiny_gguf import make_gguf

    work = Path(tempfile.mkdtemp(prefix=prefix))
    server = RealLlamaServer(make_gguf("llama", work), ["-c", "4096", "--metrics"], work / "server.log").start()
    gen = Generator(server.url).start()
    try:
        yield work, server.url, gen
    finally:
        gen.stop()
        server.stop()


def _drain(fd: int) -> None:
    """Read a pseudo-terminal's output until it closes, so the program on it never blocks on a full buffer."""
    while True:
        try:
            if not os.read(fd, 65536):
                return
        except OSError:
            return


SCREEN = {"screens": [{"name": "bench", "x": 0, "y": 0, "width": 1920, "height": 1080, "logicalDpi": 96,
                        "logicalBaseDpi": 96, "dpr": 1}]}


def kvmon_env(work: Path) -> dict[str, str]:
    """The dashboard as a returning user runs it: a 1920×1080 screen (Qt's offscreen one is 800×600, which
    squeezes the 1280×800 window and elides its header), its own settings folder with no saved geometry, and the
    host RAM bandwidth this machine's kvmon already measured (else the first round measures it)."""
    from kvmon.sources.host import CACHE_FILE_NAME, default_cache_dir

    screen = work / "screen.json"
    screen.write_text(json.dumps(SCREEN))
    config = work / "config"
    (config / "kvmon").mkdir(parents=True, exist_ok=True)
    measured = default_cache_dir() / CACHE_FILE_NAME
    if measured.is_file():
        shutil.copy(measured, config / "kvmon" / CACHE_FILE_NAME)
    return {**os.environ, "QT_QPA_PLATFORM": f"offscreen:configfile={screen}", "XDG_CONFIG_HOME": str(config)}


def start_kvmon(url: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "kvmon", url, "--interval", "1"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start_llamastat(url: str, _env: dict[str, str]) -> subprocess.Popen[bytes]:
    master, slave = pty.openpty()
    os.set_blocking(master, True)
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "160", "LINES": "48"}
    proc = subprocess.Popen([sys.executable, "-m", "llamastat", "-u", url, "-i", "1"], env=env,
                            stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    threading.Thread(target=_drain, args=(master,), daemon=True).start()
    return proc


def start_bare(env: dict[str, str]) -> subprocess.Popen[bytes]:
    """The reference window (``bench/bare_window.py``): what the same repaints cost with nothing read or computed."""
    return subprocess.Popen([sys.executable, str(ROOT / "bench" / "bare_window.py"), "--seconds", "0"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start_serve(url: str) -> subprocess.Popen[bytes]:
    """``kvmon serve`` polling at the dashboard's 1 Hz (its own default is every 5 s): kvmon's poller alone."""
    return subprocess.Popen([sys.executable, "-m", "kvmon", "serve", url, "--listen", f"127.0.0.1:{_free_port()}"],
                            env={**os.environ, "KVMON_SERVE_INTERVAL": "1"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu(p: psutil.Process) -> tuple[float, dict[int, float]]:
    """The process's CPU seconds (user + system) and each thread's."""
    t = p.cpu_times()
    return t.user + t.system, {th.id: th.user_time + th.system_time for th in p.threads()}


def measure(proc: subprocess.Popen[bytes], warmup_s: float, seconds: float) -> tuple[float, float, float]:
    """CPU-s per minute of the whole process, of its main thread, and of its other threads, over ``seconds``."""
    p = psutil.Process(proc.pid)
    time.sleep(warmup_s)
    if proc.poll() is not None:
        raise RuntimeError(f"{p.name()} ended during the warm-up (status {proc.returncode})")
    total0, threads0 = _cpu(p)
    t0 = time.monotonic()
    time.sleep(seconds)
    total1, threads1 = _cpu(p)
    minutes = (time.monotonic() - t0) / 60.0
    main = threads1.get(proc.pid, 0.0) - threads0.get(proc.pid, 0.0)
    total = total1 - total0
    return total / minutes, main / minutes, (total - main) / minutes


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def once_cpu_s(url: str, calls: int) -> list[float]:
    """CPU seconds of each ``kvmon once --json`` call (process start, two polls, the document)."""
    out = []
    for _ in range(calls):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        r = subprocess.run([sys.executable, "-m", "kvmon", "once", url, "--json"], capture_output=True, timeout=60)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if r.returncode != 0:
            raise RuntimeError(f"kvmon once exited {r.returncode}: {r.stderr.decode()[-300:]}")
        json.loads(r.stdout)
        out.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=45.0, help="measured window per process and round")
    ap.add_argument("--warmup", type=float, default=15.0, help="seconds each process runs before it is measured")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--once-calls", type=int, default=5)
    args = ap.parse_args(argv)
    if importlib.util.find_spec("llamastat") is None:
        print("llamastat is not installed: pip install -e '.[bench]' (it is the bench extra)", file=sys.stderr)
        return 2
    compileall.compile_dir(str(ROOT / "kvmon"), quiet=1)  # bytecode, as an installed kvmon has it (and llamastat)
    rows: list[tuple[str, float, float, float]] = []
    with busy_server("kvmon-side-") as (work, url, gen):
        time.sleep(3)
        t_gen, n_gen = time.monotonic(), gen.tokens
        env = kvmon_env(work)
        for r in range(1, args.rounds + 1):
            for name, start in (("kvmon dashboard", start_kvmon), ("llamastat 0.3.0", start_llamastat)):
                proc = start(url, env)
                try:
                    rows.append((f"{name} (round {r})", *measure(proc, args.warmup, args.seconds)))
                finally:
                    stop(proc)
        proc = start_serve(url)
        try:
            serve = measure(proc, args.warmup, args.seconds)
        finally:
            stop(proc)
        proc = start_bare(env)
        try:
            bare = measure(proc, args.warmup, args.seconds)
        finally:
            stop(proc)
        once = once_cpu_s(url, args.once_calls)
        rate = (gen.tokens - n_gen) / (time.monotonic() - t_gen)

    print(f"kvmon beside llamastat on a real llama-server (llama.cpp b11549, tiny llama, 1 thread, generating "
          f"~{rate:.0f} tok/s), 1 Hz, {args.seconds:.0f} s windows after {args.warmup:.0f} s")
    print(f"  {'process':28s} {'CPU-s/min':>10s} {'main thread':>12s} {'other threads':>14s}")
    for name, total, main_t, other in rows:
        print(f"  {name:28s} {total:10.3f} {main_t:12.3f} {other:14.3f}")
    print(f"  {'kvmon serve':28s} {serve[0]:10.3f} {serve[1]:12.3f} {serve[2]:14.3f}")
    print(f"  {'bare Qt window (reference)':28s} {bare[0]:10.3f} {bare[1]:12.3f} {bare[2]:14.3f}"
          "   4 labels + 2 curves set at 1 Hz, nothing read")
    print(f"  kvmon once --json: median {statistics.median(once):.2f} CPU-s per call ({len(once)} calls)")
    # what any dashboard of this stack costs before it shows anything of its own: the bare window's painting and
    # kvmon's poller alone (serve: the same sources and analysis, no window)
    floor = bare[0] + serve[0]
    llamastat = statistics.fmean(row[1] for row in rows[1::2])
    print(f"  floor: bare window + kvmon serve = {floor:.3f} CPU-s/min ({floor / llamastat:.2f}× llamastat's mean "
          f"{llamastat:.3f}); budget: dashboard ≤ {BUDGET_OVER_FLOOR}× floor = {BUDGET_OVER_FLOOR * floor:.3f}")
    over = 0
    for r in range(args.rounds):
        k, ls = rows[2 * r][1], rows[2 * r + 1][1]
        of_floor = k / floor if floor > 0 else float("inf")
        ok = of_floor <= BUDGET_OVER_FLOOR
        over += not ok
        print(f"  round {r + 1}: dashboard {k:.3f} CPU-s/min = {of_floor:.2f}× floor (budget ≤ {BUDGET_OVER_FLOOR}×), "
              f"{k / ls if ls > 0 else float('inf'):.2f}× llamastat: {'within' if ok else 'OVER BUDGET'}")
    print(f"  machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
