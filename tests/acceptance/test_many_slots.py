"""A server reporting 10,000 slots, each decoding at a plausible speed: the exporter publishes the aggregate
series and per-slot series for at most 64 slots (it made every scrape 40,001 series, 5.5 MB, 0.6-2 s), and the
speed kvmon shows is no implausible sum (the header said "511,307 tok/s")."""

from __future__ import annotations

import copy
import json
import time

import httpx
import pytest
from hostile_matrix import FIXTURES, HostileServer, _json, llama_routes
from prometheus_client.parser import text_string_to_metric_families

from kvmon.app.build import open_monitor
from kvmon.cli.serve import Exporter

N = 10_000
MAX_SLOT_SERIES = 64  # docs/exporter.md


def _slots(decoded: int) -> list[dict[str, object]]:
    one = json.loads((FIXTURES / "llama-server" / "slots.generating.json").read_bytes())[0]
    one["n_ctx"] = 4096
    del one["params"]  # (a real server's sampling settings would put 10,000 slots past the 8 MiB a body may have)
    out = []
    for i in range(N):
        s = copy.deepcopy(one)
        s["id"], s["id_task"] = i, 1000 + i
        s["next_token"][0]["n_decoded"] = decoded
        out.append(s)
    return out


@pytest.mark.slow
def test_ten_thousand_slots_give_bounded_series_and_no_implausible_speed() -> None:
    routes = llama_routes()
    props = json.loads(routes["/props"].body)
    props["total_slots"] = N
    routes["/props"] = _json(props)
    routes["/slots"] = _json(_slots(100))
    with HostileServer(routes) as llama:
        monitor = open_monitor(llama.url, timeout_s=5.0, gpu=False, host=False)
        e = Exporter(monitor)
        e.listen("127.0.0.1", 0)
        try:
            e.poll_once()
            time.sleep(1.0)
            llama.routes["/slots"] = _json(_slots(151))  # 51 tokens a second each: 510,000 tok/s together
            snap = e.poll_once()
            assert e.metrics_url is not None
            t0 = time.monotonic()
            page = httpx.get(e.metrics_url, timeout=10).text
            took = time.monotonic() - t0
        finally:
            e.stop()
            monitor.close()
    assert snap.server_read and len(snap.slots) == N
    assert snap.decode_tok_s is None and "physical bound" in snap.reasons["decode_tok_s"], snap.reasons
    samples = [s for fam in text_string_to_metric_families(page) for s in fam.samples]
    per_slot = [s for s in samples if s.name.startswith("kvmon_slot_")]
    assert 0 < len(per_slot) <= 4 * MAX_SLOT_SERIES and len({s.labels["slot"] for s in per_slot}) == MAX_SLOT_SERIES
    assert [s.value for s in samples if s.name == "kvmon_slots"] == [N]
    assert len(page) < 200_000 and took < 1.0, (len(page), took)
