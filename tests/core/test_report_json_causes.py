"""The causes and the prompt cache in once --json: shares as estimated (null where not), the prompt cache's
figures, and no prompt text anywhere."""

from __future__ import annotations

import dataclasses
import json

from synthetic import SyntheticMonitor

from kvmon.core.report_json import snapshot_to_json
from kvmon.core.snapshot import PromptCacheView, PromptChange, PromptMiss, SlowdownCause


def test_causes_keep_their_order_and_an_unestimated_share_is_null() -> None:
    s = dataclasses.replace(SyntheticMonitor().snapshot(3), slowdown_causes=(
        SlowdownCause("memory_clock", 0.65, "memory clock at 60% of its maximum (power cap)", "…"),
        SlowdownCause("slow_client", None, "the client receives slower", "…")))
    doc = snapshot_to_json(s)["slowdown_causes"]
    assert [c["code"] for c in doc] == ["memory_clock", "slow_client"]
    assert doc[0]["share"] == 0.65 and doc[1]["share"] is None


def test_no_prompt_cache_is_null_and_a_view_carries_its_figures_and_no_text() -> None:
    s = SyntheticMonitor().snapshot(3)
    assert snapshot_to_json(dataclasses.replace(s, prompt_cache=None))["prompt_cache"] is None
    change = PromptChange(sentence="system message changed at character 40 — looks like a timestamp",
                          fix="put the date in the last user message", message_index=0, role="system", offset=40,
                          change="timestamp", count=3, first_unix=1.8e9, last_unix=1.8e9 + 60, reread_tokens=48_000,
                          reread_seconds=41.0)
    view = PromptCacheView(source="each reply's timings", reads=4, reread_tokens=48_000, reused_tokens=120,
                           misses=3, miss=PromptMiss(10.0, 1.8e9 + 60, 16_000, 40, 13.7), changes=(change,),
                           next_ttft_s=14.2, next_prompt_tokens=16_500)
    doc = snapshot_to_json(dataclasses.replace(s, prompt_cache=view))["prompt_cache"]
    assert doc is not None
    assert doc["miss"] == {"t_wall": 1.8e9 + 60, "reread_tokens": 16_000, "reused_tokens": 40, "reread_s": 13.7}
    assert doc["changes"][0]["offset"] == 40 and doc["changes"][0]["change"] == "timestamp"
    assert doc["next_ttft_s"] == 14.2 and doc["reread_tokens"] == 48_000
    assert json.loads(json.dumps(doc)) == doc  # plain JSON
