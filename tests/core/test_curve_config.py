"""What differs between two server configurations, said in a user's words."""

from __future__ import annotations

import json
from dataclasses import replace

from kvmon.core.backend import Backend
from kvmon.core.curve_config import CurveConfig, differences

LLAMA = Backend("llama-server", context_setting="-c", flash_attention_setting=" -fa on")


def test_what_differs_between_two_configurations_in_a_users_words() -> None:
    a = CurveConfig("llama-server", "b11549", "m", 1, "Q4_K_M", "llama", ("RTX 3090",), (1.0,), "q8_0", "q8_0", "on",
                    32768, 1)
    assert differences(a, a) == ()
    assert differences(a, replace(a, kv_type_k="f16", kv_type_v="f16"), lambda _n: LLAMA) == ("KV q8_0 vs f16",)
    assert differences(a, replace(a, flash_attn="off"), lambda _n: LLAMA) == ("-fa on vs off",)
    assert differences(a, replace(a, server_version="b11601")) == ("b11549 vs b11601",)
    assert differences(a, replace(a, devices=("RTX 3090", "host"), weight_shares=(0.6, 0.4))) == (
        "RTX 3090 vs RTX 3090 60% + host 40%",)
    # an unknown never starts a new curve: a poll whose GPU reading failed keeps the configuration
    assert replace(a, devices=(), weight_shares=()).merged(a) == a
    assert replace(a, n_ctx=8192).merged(a).n_ctx == 8192
    assert CurveConfig.from_json(json.loads(a.key())) == a
