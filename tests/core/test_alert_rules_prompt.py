"""The prompt cache's alerts: a miss says what it cost and, where the proxy saw the prompt change, where and the
fix; a prompt sent again and again is a loop; nothing to say is no alert."""

from __future__ import annotations

from types import SimpleNamespace

from kvmon.core.alert_rules_prompt import PROXY_HINT, rule_prompt_cache_miss, rule_prompt_repeated
from kvmon.core.alert_types import NOTHING, AlertThresholds
from kvmon.core.snapshot import AlertLevel, PromptCacheView, PromptChange, PromptMiss

MISS = PromptMiss(t_monotonic=100.0, t_wall=1.8e9, reread_tokens=39_528, reused_tokens=12, reread_s=41.0)
CHANGE = PromptChange(sentence="system message changed at character 212 — looks like a timestamp",
                      fix="keep the system prompt stable; put the date in the last user message", message_index=0,
                      role="system", offset=212, change="timestamp", count=5, first_unix=1.8e9 - 600,
                      last_unix=1.8e9 - 1)


def facts(view: PromptCacheView | None) -> SimpleNamespace:
    return SimpleNamespace(prompt_cache=view)


def test_a_miss_the_proxy_explains_names_the_change_its_cost_and_the_fix() -> None:
    got = rule_prompt_cache_miss(facts(PromptCacheView(miss=MISS, changes=(CHANGE,))), AlertThresholds(), None)
    assert got is not NOTHING
    level, message, value, short = got
    assert level is AlertLevel.WARNING and value == 39_528.0
    assert message.startswith("Cache miss: 39,528 prompt tokens read again, 41 s (the cache reused 12)")
    assert "character 212 — looks like a timestamp; 5 times since" in message and CHANGE.fix in message
    assert short == "Cache miss: 39,528 prompt tokens read again, 41 s — " + CHANGE.sentence


def test_a_miss_without_the_proxy_says_how_to_find_the_cause() -> None:
    got = rule_prompt_cache_miss(facts(PromptCacheView(miss=MISS)), AlertThresholds(), None)
    assert got is not NOTHING and got[1].endswith(PROXY_HINT)


def test_no_miss_and_no_repeat_say_nothing() -> None:
    assert rule_prompt_cache_miss(facts(None), AlertThresholds(), None) is NOTHING
    assert rule_prompt_cache_miss(facts(PromptCacheView()), AlertThresholds(), None) is NOTHING
    assert rule_prompt_repeated(facts(PromptCacheView(repeated=1)), AlertThresholds(), None) is NOTHING


def test_the_same_prompt_again_and_again_is_a_loop() -> None:
    got = rule_prompt_repeated(facts(PromptCacheView(repeated=2, last_reread_tokens=900)), AlertThresholds(), None)
    assert got is not NOTHING
    assert got[0] is AlertLevel.WARNING and got[1].startswith("The same prompt was sent 3 times in a row")
    assert "read 900 of its tokens again" in got[1]
