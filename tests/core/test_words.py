"""The user's words everywhere: every alert code, reason key and provenance kvmon has, rendered through the one
formatter the window, the report card, ``once`` and the caption use, reads as words (no snake_case identifier, no
"?"); and what ``once`` prints for every built-in scenario does too."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import pytest

from kvmon.core.alert_types import CONNECTION, MODEL_FAILED, RECORDING_FAILED
from kvmon.core.alerts import AlertEngine
from kvmon.core.readings import Provenance
from kvmon.core.snapshot import Snapshot
from kvmon.core.words import (
    CAUSE_NAMES,
    FIT_FORMS,
    REGIME_MARKS,
    SUSPECTS,
    alert_name,
    cause_name,
    fit_words,
    level_word,
    provenance_words,
    reason_name,
    regime_mark,
    suspect_words,
)
from kvmon.physics.cache_types import CACHE_TYPES

SNAKE = re.compile(r"(?<![\w.-])[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?![\w-])")

CODE = re.compile(r"`[^`]*`")


def _their_words() -> frozenset[str]:
    """The servers' own words, which a person types as they are: cache types, and every setting a backend names in
    its fixes (Ollama's num_gpu, num_ctx), and macOS's iogpu.wired_limit_mb."""
    from kvmon.sources.backends import ALL

    said = " ".join(str(v) for b in ALL for v in vars(b).get("_words", {}).values() if isinstance(v, str))
    said += " " + " ".join(str(getattr(b, k, "")) for b in ALL for k in ("context_setting", "offload_setting",
                                                                          "cache_type_setting", "metrics_setting",
                                                                          "kv_in_host_fix", "prompt_cache_setting"))
    return frozenset(CACHE_TYPES) | set(SNAKE.findall(said)) | {"iogpu.wired_limit_mb"}


THEIR_WORDS = _their_words()
SOURCE = Path(__file__).resolve().parents[2] / "kvmon"
REASON_KEY = re.compile(r"""reasons\[f?["']([^"']+)["']\]|reasons(?:\.get|\.setdefault)\(["']([^"']+)["']|"""
                        r"""reasons=\{\s*["']([^"']+)["']""")


def internal_names(text: str) -> list[str]:
    """What in ``text`` is no person's word: a snake_case identifier outside `code` and the servers' own words, or a
    question mark standing for something unknown."""
    plain = CODE.sub("", text)
    found = [w for w in SNAKE.findall(plain) if w not in THEIR_WORDS]
    return found + (["?"] if "?" in plain.replace("Is the server running?", "") else [])


def test_the_check_finds_what_it_is_for() -> None:
    assert internal_names("forecast: ceiling_scaled fit on 1 point(s)") == ["ceiling_scaled"]
    assert internal_names("KV cache ?/?") == ["?"]
    assert internal_names("use `-ctk q8_0 -ctv q8_0` or q8_0 (raise iogpu.wired_limit_mb)") == []


def alert_codes() -> set[str]:
    return {code for code, _rule in AlertEngine()._rules()} | {MODEL_FAILED, RECORDING_FAILED, CONNECTION}


@lru_cache(maxsize=1)
def reason_keys() -> frozenset[str]:
    """Every reason key the code writes (its literals, and the numbered and prefixed ones as they come)."""
    keys: set[str] = set()
    for path in SOURCE.rglob("*.py"):
        for m in REASON_KEY.finditer(path.read_text(encoding="utf-8")):
            key = next(g for g in m.groups() if g)
            keys.add(re.sub(r"\{[^}]*\}", "1", key))  # gpu{g.index}.vram → gpu1.vram
    keys |= {"serving.models", "serving.progress", "gpu0.vram", "slot2.context_tokens", "slot0.processing"}
    return frozenset(keys)


@pytest.mark.parametrize("code", sorted(alert_codes()))
def test_every_alert_code_reads_as_words(code: str) -> None:
    words = alert_name(code)
    assert not internal_names(words) and words != code, (code, words)


def test_every_reason_key_reads_as_words() -> None:
    keys = reason_keys()
    assert {"decode_tok_s", "ceiling_tok_s", "placement", "latency.ttft", "gpu1.vram"} <= keys
    bad = {k: reason_name(k) for k in keys if internal_names(reason_name(k))}
    assert not bad, bad


def test_every_provenance_level_suspect_form_and_regime_cause_reads_as_words() -> None:
    rendered = [provenance_words(p.value) for p in Provenance] + [provenance_words("measured")]
    rendered += [level_word(x) for x in ("ok", "info", "warning", "critical")]
    rendered += [suspect_words(x) for x in SUSPECTS] + [fit_words(x) for x in FIT_FORMS]
    rendered += [cause_name(x) for x in CAUSE_NAMES] + [regime_mark(x) or "" for x in REGIME_MARKS]
    assert not [r for r in rendered if internal_names(r)], rendered


def _demo_snapshots() -> list[tuple[str, Snapshot]]:
    from kvmon.app.demo import demo_session, step_demo
    from kvmon.sim.catalog import names

    out = []
    for name in names():
        for start in (0.0, 300.0):
            session = demo_session(name, None, start_at_s=start, stepped=True)
            try:
                out += [(f"{name} at {start + i * 10:g} s", s) for i, s in enumerate(step_demo(session, 60.0, 10.0))]
            finally:
                session.close()
    return out


def test_what_every_scenario_shows_reads_as_words() -> None:
    """Every scenario, early and late: the headline, every alert line, the text ``once`` prints, the reasons and
    provenance as the tooltips say them."""
    from kvmon.cli.once import format_text
    from kvmon.core.report_json import snapshot_to_json

    problems: list[str] = []
    for where, s in _demo_snapshots():
        assert s.verdict is not None, where
        texts = {"headline": s.verdict.sentence, "state": s.verdict.state, "once": format_text(snapshot_to_json(s))}
        texts |= {f"alert {a.code}": a.message for a in s.alerts}
        texts |= {f"cause {c.code}": f"{c.summary}: {c.message}" for c in s.slowdown_causes}
        texts |= {f"reason {k}": reason_name(k) for k in s.reasons}
        texts |= {f"source of {k}": provenance_words(v) for k, v in s.provenance.items()}
        for what, text in texts.items():
            if found := internal_names(text):
                problems.append(f"{where}, {what}: {found} in {text[:160]!r}")
    assert not problems, "\n".join(problems[:30])
