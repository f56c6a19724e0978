"""``kvmon once [URL] [--json]``: two polls about a second apart, one report, exit.

Exit status 0 when the server was read; 2 (with a one-line reason on stderr) when it is unreachable,
rejects the key, is still loading, or the URL is bad. No Qt is loaded on this path.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, TextIO

from kvmon.core.readings import SourceError
from kvmon.core.report_json import snapshot_to_json
from kvmon.core.snapshot import Snapshot

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
    lines = [
        f"{doc['backend']} {doc['server_version'] or ''} at {doc['url']}".replace("  ", " "),
        f"model: {m['name'] or '—'} ({m['arch'] or '?'}, {m['quantization'] or '?'}), "
        f"weights {_gib(m['weight_bytes'])}, KV {m['kv_type_k'] or '?'}/{m['kv_type_v'] or '?'}",
        f"context: {_fmt(doc['context_tokens'])} / {_fmt(m['n_ctx'])} tokens per slot, {_fmt(m['n_slots'])} slot(s)",
        f"KV cache: {_fmt(m['kv_bytes_per_token'], ' B/token', 0)}, allocated {_gib(m['kv_allocated_bytes'])}, "
        f"in use {_gib(doc['kv_in_use_bytes'])}",
        f"decode: {_fmt(doc['decode_tok_s'], ' tok/s')} (ceiling {_fmt(doc['ceiling_tok_s'], ' tok/s')}), "
        f"prefill: {_fmt(doc['prefill_tok_s'], ' tok/s')}",
    ]
    if doc["ceiling_suspect"]:
        lines.append(f"ceiling uncertain ({doc['ceiling_suspect']['input']}): {doc['ceiling_suspect']['message']}")
    fc = doc["forecast"]
    if fc["fit"]["form"]:
        regime = fc["regime"]
        since = f" since {regime['description']}" if regime["cause"] not in (None, "start") else ""
        lines.append(f"forecast: {fc['fit']['form']} fit on {fc['fit']['points']} point(s){since}; "
                     + ", ".join(f"{ms['context_tokens']:,}: {_fmt(ms['tok_s'], ' tok/s')}" for ms in fc["milestones"]))
    for g in doc["gpus"]:
        lines.append(f"GPU {g['index']}: {g['name'] or '?'}, {_gib(g['vram_used_bytes'])} used of "
                     f"{_gib(g['vram_total_bytes'])}")
    if doc["gpus_unavailable_reason"]:
        lines.append(f"GPUs: {doc['gpus_unavailable_reason']}")
    for a in doc["alerts"]:
        lines.append(f"[{a['level']}] {a['message']}")
    return "\n".join(lines)


def _fail(reason: str, err: TextIO) -> int:
    print(f"kvmon: {reason.splitlines()[0] if reason else 'server not readable'}", file=err)
    return EXIT_UNREADABLE


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Poll twice ``args.interval`` apart and print the report; returns the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    from kvmon.session import open_monitor, settings_from_args

    api_key = getattr(args, "api_key", None) or os.environ.get("KVMON_API_KEY") or None
    interval = max(0.0, float(getattr(args, "interval", 1.0) or 0.0))
    try:
        monitor = open_monitor(getattr(args, "url", None), api_key=api_key,
                               timeout_s=float(getattr(args, "timeout", 3.0) or 3.0),
                               log_path=getattr(args, "log", None), settings=settings_from_args(args))
    except SourceError as e:
        return _fail(e.failure.reason, err)
    with monitor:
        snap: Snapshot = monitor.poll()
        if snap.server_read:
            time.sleep(interval)
            snap = monitor.poll()
    if not snap.server_read:
        return _fail(snap.connection.reason or snap.connection.status.value, err)
    doc = snapshot_to_json(snap)
    if getattr(args, "json", False):
        out.write(json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    else:
        out.write(format_text(doc) + "\n")
    return EXIT_OK
