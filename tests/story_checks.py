"""Checks of a scenario's story (``stories``) against what the window showed (``story_window.Seen``) and
against the ``once --json`` document at the same point; and the truth the forecast is held to: the speeds the
simulator really decodes later in the story, from its own engine playing the same script.

Each check returns a list of problems in words (empty: the point holds), so that a failed story says what the user
saw instead of what they should have.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

import numpy as np
from stories import DECODING, IDLE, LOADING, Alert, Bar, Forecast, Moment, Watch
from story_window import Seen

GIB = 1024**3
EPS_S = 0.25  # a poll lands a few milliseconds after its simulated second (the clock ran until it was stopped)
LEVELS = ("info", "warning", "critical")
BAR_PARTS = {"weights": "weights", "kv": "kv_allocated", "other": "other_processes", "free": "free",
             "compute": "server_other"}
TRUTH_HORIZON_S = 4000.0  # how far past a forecast the simulator's own answers are looked at


# ------------------------------------------------------------------------------------------------ the truth


@lru_cache(maxsize=32)
def _answers(scenario: str, model: str | None) -> tuple[tuple[float, int, float, float], ...]:
    """(start in story time, server lifetime, mean depth, tok/s) of every answer the simulator's engine decodes in the
    story's first ``TRUTH_HORIZON_S`` seconds past where the stories look (the scripted chat, with its per-answer
    noise)."""
    from kvmon.sim.clock import SimClock
    from kvmon.sim.engine import SimEngine
    from kvmon.sim.multi_scenarios import get_multi_scenario
    from kvmon.sim.scenarios import get_scenario

    multi = get_multi_scenario(scenario)
    t0 = 0.0
    if multi is not None:  # the model's own server, started when the plan loads it
        assert model is not None, f"{scenario}: a forecast of a router or llama-swap names its model"
        spec = multi.spec(model)
        assert spec is not None, f"{scenario} has no model {model!r}"
        t0 = next(t for t, action, name in multi.plan if action == "load" and name == model)
        sc = replace(spec.scenario, initial_load_s=spec.load_s)
    else:
        sc = get_scenario(scenario)
    done: list[Any] = []
    engine = SimEngine(sc, SimClock(running=False), on_request_end=done.append)
    _engines[(scenario, model)] = (engine, t0)
    horizon = 3000.0 + TRUTH_HORIZON_S
    t = 0.0
    while t < horizon:
        t += 10.0
        engine.advance(t)
    out = []
    for r in done:
        n = len(r.token_times)
        if n < 8 or r.aborted_at is not None:
            continue
        tok_s = (n - 1) / float(r.token_times[-1] - r.token_times[0])
        out.append((t0 + r.t_start, r.epoch, r.cache_n + r.prompt_n + n / 2, tok_s))
    return tuple(out)


_engines: dict[tuple[str, str | None], tuple[Any, float]] = {}
DEPTH_REACH = 0.02  # an answer this much shallower than a depth still says what the simulator decodes there


def simulated_speed(scenario: str, depth: int, after_s: float, model: str | None = None) -> float | None:
    """What the simulator really decodes at ``depth`` later in the story than ``after_s``, in the same server lifetime
    (a forecast cannot see a reload coming): interpolated between the answers around that depth (None when no later
    answer reaches it, or none is shallower)."""
    answers = _answers(scenario, model)
    engine, t0 = _engines[(scenario, model)]
    epoch = engine.epoch_at(max(0.0, after_s - t0)).index
    pts = sorted((d, v) for t, e, d, v in answers if t >= after_s and e == epoch)
    if not pts or not pts[0][0] <= depth <= pts[-1][0] * (1 + DEPTH_REACH):
        return None
    ds, vs = zip(*pts, strict=True)
    return float(np.interp(depth, ds, vs))


# ------------------------------------------------------------------------------------------------ the window


def window_state(s: Seen) -> str | None:
    """What the window says the server does: a speed measured now (the big number in the decode colour), the model
    loading (the headline, or the alerts panel's connection line), else nothing decoding."""
    if s.live and re.match(r"^[\d.,]+ tok/s$", s.speed):
        return DECODING
    if s.headline.startswith("Loading") or (s.connection_line() or "").startswith("Model loading"):
        return LOADING
    return IDLE


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _in(value: float, rng: tuple[float, float]) -> bool:
    return rng[0] - 1e-9 <= value <= rng[1] + 1e-9


def _bars_problems(shown: dict[str, dict[str, float]], bars: tuple[Bar, ...]) -> list[str]:
    """``shown``: each bar's label and its parts in GiB."""
    out = []
    want = [b.device for b in bars]
    if sorted(shown) != sorted(want):
        out.append(f"memory bars {sorted(shown)}, the story wants {sorted(want)}")
    for b in bars:
        parts = shown.get(b.device)
        if parts is None:
            continue
        for part, key in BAR_PARTS.items():
            rng = getattr(b, part)
            if rng is not None and not _in(parts.get(key, 0.0), rng):
                out.append(f"{b.device} {part} {parts.get(key, 0.0):.2f} GiB, the story wants {rng[0]}–{rng[1]} GiB")
    return out


def _forecast_problems(where: str, at: float, depth_now: int | None, fc: Forecast, value_at: Any, ceiling_at: Any,
                       scenario: str, model: str | None) -> list[str]:
    out = []
    for d in fc.depths:
        if depth_now is not None and d <= depth_now:
            out.append(f"the story asks the forecast at {d:,} tokens, not deeper than the {depth_now:,} shown")
            continue
        v, c = value_at(d), ceiling_at(d)
        if v is None or not math.isfinite(v) or v <= 0:
            out.append(f"{where}: no finite forecast at {d:,} tokens ({v})")
            continue
        if c is None or v > c * (1 + 1e-6):
            out.append(f"{where}: forecast {v:.2f} tok/s at {d:,} tokens, above the ceiling there ({c})")
        if fc.within is not None:
            truth = simulated_speed(scenario, d, at, model)
            if truth is None:
                out.append(f"the simulator decodes nothing at {d:,} tokens later in the story: no truth to hold the "
                           "forecast to (pick a depth the story reaches)")
            elif abs(v - truth) > fc.within * truth:
                out.append(f"{where}: forecast {v:.2f} tok/s at {d:,} tokens; the simulator later decodes {truth:.2f} "
                           f"there (more than {fc.within:.0%} off)")
    return out


def _window_bars(s: Seen) -> dict[str, dict[str, float]]:
    return {b.label: {k: v / GIB for k, v in b.parts.items()} for b in s.bars}


def _curve_at(curve: tuple[np.ndarray, np.ndarray]) -> Any:
    x, y = curve
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]

    def at(d: float) -> float | None:
        if not x.size or not x[0] <= d <= x[-1]:
            return None
        return float(np.interp(d, x, y))

    return at


def find_poll(polls: Sequence[Any], m: Moment, state: Any, t_of: Any = lambda p: p.t_s) -> Any | None:
    """The poll a moment is checked at: the first at or after ``at_s`` (within ``within_s``) in the moment's state."""
    for p in polls:
        t = t_of(p)
        if t < m.at_s - EPS_S:
            continue
        if t > m.at_s + m.within_s + EPS_S:
            return None
        if m.state is None or state(p) == m.state:
            return p
    return None


def _no_poll(m: Moment, states: set[str]) -> str:
    return f"no poll between {m.at_s:.0f} and {m.at_s + m.within_s:.0f} s shows {m.state} (shown: {sorted(states)})"


def window_problems(scenario: str, seen: Sequence[Seen], m: Moment) -> list[str]:
    """What the window showed at a moment that the story says it must not."""
    s = find_poll(seen, m, window_state)
    if s is None:
        return [_no_poll(m, {str(window_state(x)) for x in seen if m.at_s <= x.t_s <= m.at_s + m.within_s + EPS_S})]
    out: list[str] = []
    at = f"at {s.t_s:.0f} s"
    if m.ceiling:
        idle = not s.live  # no decode speed now: the ceiling "here" beside the last one
        got = re.search(r"ceiling ([\d.,]+) tok/s here", s.efficiency) if idle else \
            re.search(r"of ([\d.,]+) ceiling", s.efficiency)
        if got is None:
            out.append(f"{at}: no ceiling in the header ({s.speed!r} {s.efficiency!r})")
        if not idle:
            pct = re.search(r"· (\d+)%$", s.efficiency)
            if pct is None or int(pct.group(1)) > 100:
                out.append(f"{at}: efficiency {s.efficiency!r}, not a share of at most 100%")
    if m.ceiling_tok_s is not None:
        got = re.search(r"(?:of|ceiling) ([\d.,]+)(?: tok/s here| ceiling)", s.efficiency)
        if got is None or not _in(_number(got.group(1)), m.ceiling_tok_s):
            out.append(f"{at}: the header's ceiling {s.efficiency!r}, the story wants {m.ceiling_tok_s[0]:g}–"
                       f"{m.ceiling_tok_s[1]:g} tok/s")
    for name, status in m.models:
        chip = s.chips.get(name, "")
        if status not in chip:
            out.append(f"{at}: {name}'s chip says {chip!r}, the story wants {status!r}")
    if m.depth and not re.match(r"context [\d.,]+K? of", s.context):
        out.append(f"{at}: no context depth in the header ({s.context!r})")
    if m.spilled is not None:
        host = s.bar("Host")
        held = host is not None and (host.gib("weights") + host.gib("kv_allocated")) > 0.01
        spilled = s.devices.endswith("+ CPU") and held
        if spilled != m.spilled:
            held_gib = 0.0 if host is None else host.gib("weights") + host.gib("kv_allocated")
            out.append(f"{at}: spilled {spilled} (devices {s.devices!r}, host RAM holds {held_gib:.2f} GiB of the "
                       f"model), the story wants {m.spilled}")
    if m.bars is not None:
        out += [f"{at}: {p}" for p in _bars_problems(_window_bars(s), m.bars)]
    codes = {a.code for a in s.alerts}
    out += [f"{at}: alert {c} not shown (shown: {sorted(x for x in codes if x)})" for c in m.alerts if c not in codes]
    if m.model is not None and not s.model.startswith(m.model):
        out.append(f"{at}: the header names {s.model!r}, the story wants {m.model!r}")
    if m.level is not None:
        from kvmon.gui import theme

        if s.headline_colour != theme.hex_color(m.level):
            out.append(f"{at}: the headline is coloured {s.headline_colour}, the story wants {m.level}'s "
                       f"{theme.hex_color(m.level)} ({s.headline!r})")
        out += [f"{at}: the headline {s.headline!r} does not say {w!r}" for w in m.says if w not in s.headline]
    if m.forecast is not None:
        fx, _fy = s.forecast
        if not fx.size:
            out.append(f"{at}: no forecast curve drawn")
        else:
            out += _forecast_problems(f"window {at}", s.t_s, s.snapshot.context_tokens, m.forecast,
                                      _curve_at(s.forecast), _curve_at(s.ceiling), scenario, m.model)
    return out


@dataclass(frozen=True)
class Point:
    """One poll as the alert checks need it, from the window or from the document: its time, the context depth, the
    level of each alert shown, and every warning-or-worse line with the words it says (code None: the connection's)."""

    t_s: float
    depth: int | None
    levels: dict[str, int]
    warnings: tuple[tuple[str | None, str], ...]


def _rank(level: str | None) -> int:
    return LEVELS.index(level) if level in LEVELS else -1


def window_points(seen: Sequence[Seen]) -> list[Point]:
    out = []
    for s in seen:
        levels = {a.code: _rank(a.level) for a in s.alerts if a.code}
        warnings = tuple((a.code, a.text) for a in s.alerts if _rank(a.level) >= _rank("warning"))
        out.append(Point(s.t_s, s.snapshot.context_tokens, levels, warnings))
    return out


FAILED_STATUSES = {"unreachable": "Server gone", "timeout": "Server not answering", "auth_rejected": "API key rejected",
                   "bad_response": "Unexpected answer", "bad_url": "Bad URL"}


def json_points(docs: Sequence[tuple[float, dict[str, Any]]]) -> list[Point]:
    out = []
    for t, doc in docs:
        levels: dict[str, int] = {}
        for a in doc["alerts"]:
            levels[a["code"]] = max(levels.get(a["code"], -1), _rank(a["level"]))
        warnings = [(a["code"], a["message"]) for a in doc["alerts"] if _rank(a["level"]) >= _rank("warning")]
        status = doc["connection"]["status"]
        if status in FAILED_STATUSES:
            warnings.insert(0, (None, f"{FAILED_STATUSES[status]}: {doc['connection']['reason']}"))
        out.append(Point(t, doc["context_tokens"], levels, tuple(warnings)))
    return out


def alert_deadline(points: Sequence[Point], a: Alert) -> float | None:
    """When the alert must be shown by: ``by_s``, or the first poll at ``by_depth`` tokens of context."""
    if a.by_s is not None:
        return a.by_s
    return next((p.t_s for p in points if (p.depth or 0) >= (a.by_depth or 0)), None)


def alert_problems(points: Sequence[Point], a: Alert) -> list[str]:
    """The alert rises in time, not before its cause, and goes when the cause goes."""
    out = []
    want = _rank(a.level)
    shown = [(p.t_s, p.levels.get(a.code, -1)) for p in points]
    early = [t for t, r in shown if r >= want and t < a.not_before_s - EPS_S]
    if early:
        out.append(f"{a.code} at {a.level} shown at {early[0]:.0f} s, before its cause (not before "
                   f"{a.not_before_s:.0f} s)")
    by = alert_deadline(points, a)
    if by is None:
        out.append(f"the watch never reaches {a.by_depth:,} tokens: no time to hold {a.code} to")
    else:
        risen = [t for t, r in shown if r >= want and t >= a.not_before_s - EPS_S]
        if not risen or risen[0] > by + EPS_S:
            first = f"first at {risen[0]:.0f} s" if risen else "never"
            out.append(f"{a.code} at {a.level}: {first}; the story wants it by {by:.0f} s")
    if a.gone_s is not None:
        late = [t for t, r in shown if r >= 0 and t > a.gone_s + a.clear_within_s + EPS_S]
        if late:
            out.append(f"{a.code} still shown at {late[0]:.0f} s (and to {late[-1]:.0f} s); its cause went at "
                       f"{a.gone_s:.0f} s, the story wants it gone by {a.gone_s + a.clear_within_s:.0f} s")
    return out


def false_alarms(points: Sequence[Point], w: Watch) -> list[str]:
    """Warnings the story does not name: each is a false alarm (the first poll of each is said)."""
    allowed = w.codes()
    out: dict[str, str] = {}
    for p in points:
        for code, text in p.warnings:
            key = code or text.split(":", 1)[0]
            if code not in allowed and key not in out:
                out[key] = f"{key!r} at {p.t_s:.0f} s: {text[:140]}"
    return list(out.values())


# ------------------------------------------------------------------------------------------------ once --json


def json_state(doc: dict[str, Any]) -> str | None:
    if doc["connection"]["status"] == "loading":
        return LOADING
    if doc["decode_tok_s"] is not None:
        return DECODING
    if str(doc["reasons"].get("decode_tok_s", "")).startswith("idle"):
        return IDLE
    return None


def json_bars(doc: dict[str, Any]) -> dict[str, dict[str, float]]:
    """The memory bars the document's numbers make (the memory panel's rules: a device with a size, host RAM when
    decode reads it, there is no GPU, or part of the model lives there)."""
    out: dict[str, dict[str, float]] = {}
    for g in doc["gpus"]:
        if not g["vram_total_bytes"]:
            continue
        label = "Unified" if g["kind"] == "unified_memory" else f"GPU {g['index']}"
        parts = {"weights": g["weights_bytes"] or 0, "kv_allocated": g["kv_allocated_bytes"] or 0,
                 "other_processes": g["other_processes_bytes"] or 0, "free": g["vram_free_bytes"] or 0}
        used = g["vram_used_bytes"]
        if used is not None:
            parts["server_other"] = max(0, used - parts["weights"] - parts["kv_allocated"] - parts["other_processes"])
        out[label] = {k: v / GIB for k, v in parts.items()}
    h = doc["host"]
    in_host = (h["weights_in_host_bytes"] or 0) + (h["kv_in_host_bytes"] or 0)
    unified = any(g["kind"] == "unified_memory" for g in doc["gpus"])
    if h["ram_total_bytes"] and (h["in_ceiling"] or not doc["gpus"] or (in_host and not unified)):
        other = h["ram_total_bytes"] - (h["ram_available_bytes"] or 0) - in_host
        free = min(h["ram_available_bytes"] or 0, h["ram_total_bytes"] - in_host - max(other, 0))
        out["Host"] = {"weights": (h["weights_in_host_bytes"] or 0) / GIB, "kv_allocated": (h["kv_in_host_bytes"] or 0)
                       / GIB, "other_processes": max(other, 0) / GIB, "free": max(free, 0) / GIB}
    return out


def json_problems(scenario: str, docs: Sequence[tuple[float, dict[str, Any]]], m: Moment) -> list[str]:
    """What the ``once --json`` documents say at the moment's poll that the story says they must not."""
    found = find_poll(docs, m, lambda p: json_state(p[1]), t_of=lambda p: p[0])
    if found is None:
        return [_no_poll(m, {str(json_state(d)) for t, d in docs if m.at_s <= t <= m.at_s + m.within_s + EPS_S})]
    t_s, doc = found
    out: list[str] = []
    at = f"once --json at {t_s:.0f} s"
    state = json_state(doc)
    if m.ceiling:
        if doc["ceiling_tok_s"] is None:
            out.append(f"{at}: ceiling_tok_s null ({doc['reasons'].get('ceiling_tok_s')})")
        if state == DECODING and (doc["efficiency"] is None or doc["efficiency"] > 1.0):
            out.append(f"{at}: efficiency {doc['efficiency']} ({doc['reasons'].get('efficiency')})")
    if m.ceiling_tok_s is not None and (doc["ceiling_tok_s"] is None or not _in(doc["ceiling_tok_s"],
                                                                              m.ceiling_tok_s)):
        out.append(f"{at}: ceiling_tok_s {doc['ceiling_tok_s']}, the story wants {m.ceiling_tok_s[0]:g}–"
                   f"{m.ceiling_tok_s[1]:g}")
    statuses = {x["name"]: x["status"] for x in (doc["serving"] or {}).get("models", [])}
    for name, status in m.models:
        if statuses.get(name) != status:
            out.append(f"{at}: {name} is {statuses.get(name)!r}, the story wants {status!r}")
    if m.depth and doc["context_tokens"] is None:
        out.append(f"{at}: context_tokens null ({doc['reasons'].get('context_tokens')})")
    if m.spilled is not None:
        h = doc["host"]
        # as the header says it: a GPU, and decode reads part of the model or its cache from host RAM beside it
        spilled = bool(doc["gpus"] and h["in_ceiling"] and ((h["weights_in_host_bytes"] or 0)
                                                            + (h["kv_in_host_bytes"] or 0)))
        if spilled != m.spilled:
            out.append(f"{at}: spilled {spilled}, the story wants {m.spilled}")
    if m.bars is not None:
        out += [f"{at}: {p}" for p in _bars_problems(json_bars(doc), m.bars)]
    codes = {a["code"] for a in doc["alerts"]}
    out += [f"{at}: alert {c} missing (alerts: {sorted(codes)})" for c in m.alerts if c not in codes]
    if m.level is not None:
        v = doc["verdict"]
        if v["level"] != m.level:
            out.append(f"{at}: verdict {v['level']} ({v['sentence']!r}), the story wants {m.level}")
        out += [f"{at}: the verdict {v['sentence']!r} does not say {w!r}" for w in m.says if w not in v["sentence"]]
    if m.model is not None:
        name = doc["model"]["name"] or ""
        followed = (doc["serving"] or {}).get("followed") or ""
        if not (name.startswith(m.model) or followed == m.model):
            out.append(f"{at}: model {name!r} (followed {followed!r}), the story wants {m.model!r}")
    if m.forecast is not None:
        by_depth = {ms["context_tokens"]: ms for ms in doc["forecast"]["milestones"]}

        def value_at(d: int) -> float | None:
            ms = by_depth.get(d)
            return None if ms is None else ms["tok_s"]

        def ceiling_at(d: int) -> float | None:
            ms = by_depth.get(d)
            return None if ms is None else ms["ceiling_tok_s"]

        out += _forecast_problems(at, t_s, doc["context_tokens"], m.forecast, value_at, ceiling_at, scenario, m.model)
    return out


def same_headline(scenario: str, seen: Sequence[Seen], docs: Sequence[tuple[float, dict[str, Any]]],
                  m: Moment) -> list[str]:
    """At a key moment the window's headline and ``once --json``'s verdict are one: the same sentence, the level's
    colour."""
    s = find_poll(seen, m, window_state)
    found = find_poll(docs, m, lambda p: json_state(p[1]), t_of=lambda p: p[0])
    if s is None or found is None:
        return [f"{scenario}: no poll at {m.at_s:g} s in the {'window' if s is None else 'document'}"]
    t, doc = found
    if abs(t - s.t_s) > EPS_S:
        return [f"the window's poll at {s.t_s:.0f} s, the document's at {t:.0f} s: not the same point"]
    v = doc["verdict"]
    out = []
    if s.headline != v["sentence"]:
        out.append(f"at {t:.0f} s the window says {s.headline!r}, once --json {v['sentence']!r}")
    from kvmon.gui import theme

    if s.headline_colour != theme.hex_color(v["level"]):
        out.append(f"at {t:.0f} s the headline's colour {s.headline_colour} is not {v['level']}'s")
    return out
