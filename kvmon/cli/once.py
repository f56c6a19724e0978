"""``kvmon once [URL | --demo SCENARIO] [--json]``: two polls about a second apart, one report, exit.

Each poll's requests share one deadline, ``--timeout`` (``kvmon.core.deadline``): whatever hangs, ``once`` ends
within two timeouts, the interval and a little more. A first poll that ran out of time is followed by the second
all the same: the endpoint that hung is then asked with a short limit, and the rest of the reading comes without it.

Exit status 0 when the server was read; 2 (with the headline's one line on stderr, and with ``--json`` the document
that says so on stdout) when it is unreachable, rejects the key, is still loading, or the URL is bad. Without a URL
it reads the first server found on this machine (``kvmon once --list`` lists them all). With ``--demo`` it reads the
built-in simulator at a point of its story (``--start-at``, ``--after``), as the dashboard shows it there. No Qt is
loaded on this path.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, replace
from typing import Any, TextIO

from kvmon.core.connection import failure_snapshot
from kvmon.core.deadline import poll_deadline
from kvmon.core.readings import SourceError
from kvmon.core.redact import scrub
from kvmon.core.report_json import snapshot_to_json
from kvmon.core.snapshot import ConnectionStatus, Snapshot
from kvmon.core.words import fit_words, level_word, suspect_words

EXIT_OK = 0
EXIT_UNREADABLE = 2


def _fmt(value: Any, unit: str = "", digits: int = 1) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.{digits}f}{unit}"
    return f"{value:,}{unit}" if isinstance(value, int) else f"{value}{unit}"


def _gib(n: Any) -> str:
    return "—" if n is None else f"{n / 1024**3:.2f} GiB"


def format_text(doc: dict[str, Any]) -> str:
    """A few human lines from the JSON document (the same numbers, for a terminal)."""
    m = doc["model"]
    v = doc.get("verdict")
    lines = [v["sentence"] + (f" [{level_word(v['level'])}]" if v["level"] != "ok" else "")] if v else []
    lines += [
        f"{doc['backend']} {doc['server_version'] or ''} at {doc['url']}".replace("  ", " "),
        f"model: {m['name'] or '—'} ({m['arch'] or 'architecture —'}, {m['quantization'] or 'quantization —'}), "
        f"weights {_gib(m['weight_bytes'])}, KV cache {m['kv_type_k'] or '—'}/{m['kv_type_v'] or '—'}",
        f"context: {_fmt(doc['context_tokens'])} / {_fmt(m['n_ctx'])} tokens per slot, {_fmt(m['n_slots'])} slot(s)",
        f"KV cache: {_fmt(m['kv_bytes_per_token'], ' B/token', 0)}, allocated {_gib(m['kv_allocated_bytes'])}, "
        f"in use {_gib(doc['kv_in_use_bytes'])}",
        f"decode: {_fmt(doc['decode_tok_s'], ' tok/s')} (ceiling {_fmt(doc['ceiling_tok_s'], ' tok/s')}), "
        f"prefill: {_fmt(doc['prefill_tok_s'], ' tok/s')}",
    ]
    sv = doc.get("serving")
    if sv:
        shown = f", showing {sv['followed']} ({sv['follow_reason']})" if sv["followed"] else ""
        models = ", ".join(f"{m['name']} {m['status']}" + (f" {m['progress'] * 100:.0f} %" if m["progress"]
                                                            is not None else "") for m in sv["models"])
        from kvmon.core.serving import SERVING_LABELS

        lines.insert(1, f"{SERVING_LABELS.get(sv['kind'], sv['kind'])}{shown}: {models or 'no models'}"
                     + (f" — {sv['message']}" if sv["message"] else ""))
    if doc["ceiling_suspect"]:
        suspect = doc["ceiling_suspect"]
        lines.append(f"ceiling uncertain ({suspect_words(suspect['input'])} is likely wrong): {suspect['message']}")
    fc = doc["forecast"]
    if fc["fit"]["form"]:
        regime = fc["regime"]
        since = f" since {regime['description']}" if regime["cause"] not in (None, "start") else ""
        n = fc["fit"]["points"]
        lines.append(f"forecast: {fit_words(fc['fit']['form'])}, on {n} measured point{'s' if n != 1 else ''}{since}; "
                     + ", ".join(f"{ms['context_tokens']:,}: {_fmt(ms['tok_s'], ' tok/s')}" for ms in fc["milestones"]))
    lines += [f"why below the ceiling: {c['message']}" for c in doc.get("slowdown_causes") or ()]
    pc = doc.get("prompt_cache")
    if pc and pc["next_ttft_s"] is not None:
        wait = pc["next_ttft_s"]
        wait_said = f"{wait * 1000:.0f} ms" if wait < 1 else f"{wait:.1f} s"
        lines.append(f"prompt cache: {pc['reread_tokens']:,} tokens read, {pc['reused_tokens']:,} reused; next reply's "
                     f"first token in ~{wait_said} ({pc['next_prompt_tokens']:,} tokens to read)")
    for g in doc["gpus"]:
        lines.append(f"GPU {g['index']}: {g['name'] or '—'}, {_gib(g['vram_used_bytes'])} used of "
                     f"{_gib(g['vram_total_bytes'])}")
    if doc["gpus_unavailable_reason"]:
        lines.append(f"GPUs: {doc['gpus_unavailable_reason']}")
    for a in doc["alerts"]:
        lines.append(f"[{a['level']}] {a['message']}")
    return "\n".join(lines)


def found_to_json(found: Any) -> dict[str, Any]:
    """One server of ``once --list --json``: where, what, how it was found, and why it does not answer."""
    return {"url": found.url, "backend": found.backend, "label": found.label, "version": found.version,
            "serving": found.summary, "found_by": found.how, "pid": found.pid, "answering": found.answering,
            "reason": found.reason}


def format_list(discovery: Any) -> str:
    """``once --list``: one line per server found, processes first."""
    if not discovery.found:
        from kvmon.sources.discover import nothing_found_reason

        return nothing_found_reason(discovery)
    n = len(discovery.found)
    lines = [f"{n} server{'s' if n != 1 else ''} found:"]
    width = max(len(f.url) for f in discovery.found)
    for f in discovery.found:
        what = f.label + (f" {f.version}" if f.version else "")
        detail = f.summary if f.answering and not f.reason else (f.reason or "not answering")
        lines.append(f"  {f.url:<{width}}  {what}" + (f" — {detail}" if detail else "") + f"  [{f.how}]")
    return "\n".join(lines)


def run_list(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``kvmon once --list [--json]``: every server on this machine; 0 when one answers, else 2."""
    from kvmon import __version__
    from kvmon.app.detection import find_servers

    api_key = getattr(args, "api_key", None) or os.environ.get("KVMON_API_KEY") or None
    found = find_servers(api_key=api_key, timeout_s=min(float(getattr(args, "timeout", 3.0) or 3.0), 2.0))
    if getattr(args, "json", False):
        doc = {"kvmon_version": __version__, "servers": [found_to_json(f) for f in found.found],
               "looked_at": list(found.looked_at)}
        out.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    else:
        out.write(format_list(found) + "\n")
    return EXIT_OK if found.answering() else EXIT_UNREADABLE


def _fail(reason: str, err: TextIO) -> int:
    print(f"kvmon: {reason.splitlines()[0] if reason else 'server not readable'}", file=err)
    return EXIT_UNREADABLE


def unread_line(snap: Snapshot) -> str:
    """The one line said when the server could not be read: the headline's sentence (``kvmon screenshot`` says the
    same)."""
    verdict = snap.verdict
    return verdict.sentence if verdict is not None else snap.connection.reason or snap.connection.status.value


def _unread(snap: Snapshot, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """A server not read: with ``--json`` the document that says so (its verdict), and the one line; exit 2."""
    if getattr(args, "json", False):
        _print(snap, args, out)
    return _fail(unread_line(snap), err)


def _print(snap: Snapshot, args: argparse.Namespace, out: TextIO) -> None:
    doc = snapshot_to_json(snap)
    if getattr(args, "json", False):
        out.write(json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    else:
        out.write(format_text(doc) + "\n")


def run_demo(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``kvmon once --demo S [--start-at T] [--after N]``: the simulator in-process, joined T simulated seconds in and
    watched for N more (a poll every ``--interval`` simulated seconds, the clock moved on between polls, no real
    waiting); then the document the dashboard shows at that point. It is printed in every state of the story,
    loading included: that is what the window shows then."""
    from kvmon.app.demo import demo_session, step_demo
    from kvmon.app.session import settings_from_args
    from kvmon.sim.catalog import check

    if getattr(args, "url", None):
        return _fail(f"either a URL ({args.url}) or --demo, not both", err)
    try:
        name = check(args.demo)
    except ValueError as e:
        return _fail(str(e), err)
    interval = max(0.0, float(getattr(args, "interval", 1.0) or 0.0))
    after = getattr(args, "after", None)
    after = interval if after is None else float(after)
    session = demo_session(name, None, timeout_s=float(getattr(args, "timeout", 3.0) or 3.0),
                           start_at_s=float(getattr(args, "start_at", 0.0) or 0.0),
                           analyzer_settings=settings_from_args(args), stepped=True)
    try:
        *_, snap = step_demo(session, after, interval if interval > 0 else after)
    finally:
        session.close()
    _print(snap, args, out)
    return EXIT_OK


@dataclass
class FirstReading:
    """What the first poll of the server the command line names (or the first found here) gave: the open monitor
    and its Snapshot, the Snapshot of a server that could not be opened, or why no server was found at all."""

    monitor: Any = None  # open (the caller closes it); None when the server could not be opened
    snapshot: Snapshot | None = None
    nothing: str | None = None  # no URL given and no server answers on this machine: why, in one line


def first_reading(args: argparse.Namespace, err: TextIO) -> FirstReading:
    """Open the server ``args`` names (``url``; else the first one answering on this machine) and poll it once,
    under one deadline: what ``once`` and ``kvmon screenshot`` read before anything else."""
    from kvmon.app.build import open_monitor
    from kvmon.app.detection import find_servers
    from kvmon.app.session import settings_from_args
    from kvmon.sources.discover import nothing_found_reason

    api_key = getattr(args, "api_key", None) or os.environ.get("KVMON_API_KEY") or None
    timeout_s = float(getattr(args, "timeout", 3.0) or 3.0)
    url, backend = getattr(args, "url", None), None
    if url is None:  # the first server found; the others are named, and --list lists them
        found = find_servers(api_key=api_key, timeout_s=min(timeout_s, 2.0))
        answering = found.answering()
        if not answering:
            return FirstReading(nothing=nothing_found_reason(found))
        url, backend = answering[0].url, answering[0].backend
        if len(answering) > 1:
            others = ", ".join(f.url for f in answering[1:])
            print(f"kvmon: reading {url} ({answering[0].label}); also found {others} (kvmon once --list)", file=err)
    with poll_deadline(timeout_s):  # which server it is and the first reading share the first poll's deadline
        try:
            monitor = open_monitor(url, api_key=api_key, timeout_s=timeout_s, log_path=getattr(args, "log", None),
                                   backend=backend, devices_url=getattr(args, "devices", None),
                                   settings=settings_from_args(args))
        except SourceError as e:
            return FirstReading(snapshot=failure_snapshot(e.failure, seq=1, t_monotonic=time.monotonic(),
                                                          t_wall=time.time(), url=scrub(url) if url else None))
        try:
            snap = monitor.poll()
        except BaseException:
            monitor.close()
            raise
    return FirstReading(monitor, replace(snap, url=snap.url or monitor.display_url))


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Poll twice ``args.interval`` apart and print the report; returns the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    if getattr(args, "list", False):
        return run_list(args, out, err)
    if getattr(args, "demo", None) is not None:
        return run_demo(args, out, err)
    if getattr(args, "after", None) is not None or bool(getattr(args, "start_at", 0.0)) or \
            getattr(args, "speed", 1.0) != 1.0:
        return _fail("--start-at, --after and --speed are for --demo (a real server is read as it is now)", err)
    first = first_reading(args, err)
    if first.nothing is not None:
        return _fail(first.nothing, err)
    monitor, snap = first.monitor, first.snapshot
    assert snap is not None  # a server was named or found: it was read, or why not is its Snapshot
    if monitor is None:
        return _unread(snap, args, out, err)
    interval = max(0.0, float(getattr(args, "interval", 1.0) or 0.0))
    # a first poll that ran out of time (something listens, it did not answer in time): the second asks what hung
    # with a short limit, so the rest of the reading comes if the server answers anything
    with monitor:
        if snap.server_read or snap.connection.status is ConnectionStatus.TIMEOUT:
            time.sleep(interval)
            snap = monitor.poll()
    if not snap.server_read:
        return _unread(replace(snap, url=snap.url or monitor.display_url), args, out, err)
    _print(snap, args, out)
    return EXIT_OK
