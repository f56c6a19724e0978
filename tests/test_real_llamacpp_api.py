"""kvmon against the real llama.cpp b11549 server: every endpoint it reads, the decode rate, the API key, a restart.

The server is the ``xllamacpp`` wheel in a subprocess (``real_llama_server.py``) on a tiny llama GGUF, one
thread, so kvmon's own polling does not slow it down.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import threading
import time
from collections.abc import Callable

import httpx
import pytest
from real_llama_server import KVMON_TIMEOUT_S, RealLlamaServer, TimedReply

from kvmon.app.build import open_monitor
from kvmon.app.group_monitor import GroupMonitor
from kvmon.app.monitor import Monitor
from kvmon.cli import main as kvmon_main
from kvmon.core.snapshot import Activity
from kvmon.sources.llamacpp.parse import parse_metrics, parse_slot
from kvmon.sources.llamacpp.source import LlamaServerSource

FLAGS = ["-c", "2048", "-np", "1", "--metrics", "--props"]
# the counters this build's /metrics has (gauges are never kept: every scrape resets them)
COUNTERS = {"prompt_tokens_total", "prompt_seconds_total", "tokens_predicted_total", "tokens_predicted_seconds_total",
            "n_decode_total", "n_tokens_max", "prompt_tokens_cached_total"}
TIMINGS = {"prompt_n", "prompt_ms", "predicted_n", "predicted_ms", "predicted_per_second", "cache_n"}


def _run_kvmon(*argv: str) -> tuple[int, str, str]:
    """``kvmon ARGV`` in this process: (exit status, stdout, stderr)."""
    if argv[:1] == ("once",) and "--timeout" not in argv:
        argv = (*argv, "--timeout", f"{KVMON_TIMEOUT_S:g}")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = kvmon_main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def test_every_endpoint_parses_without_unknown_fields(llama_server: Callable[..., RealLlamaServer]) -> None:
    server = llama_server("llama", FLAGS)
    url = server.url
    predicted = 0
    for path, body in (("/completion", {"prompt": "hello", "n_predict": 8}),
                       ("/v1/completions", {"prompt": "hello", "max_tokens": 8}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8})):
        answer = httpx.post(f"{url}{path}", json=body, timeout=30).json()
        assert TIMINGS <= set(answer["timings"]), (path, answer["timings"])  # what kvmon proxy reads
        predicted += answer["timings"]["predicted_n"]

    for path in ("/health", "/v1/health"):
        assert httpx.get(f"{url}{path}").json() == {"status": "ok"}
    reasons: dict[str, str] = {}
    slots = [parse_slot(raw, reasons) for raw in httpx.get(f"{url}/slots").json()]
    assert reasons == {} and len(slots) == 1 and slots[0] is not None
    s = slots[0]
    assert (s.id, s.n_ctx, s.processing) == (0, 2048, False) and s.id_task is not None and s.id_task >= 0
    assert s.context_tokens is not None and s.n_decoded is not None and s.n_prompt_tokens_processed is not None
    assert COUNTERS <= set(parse_metrics(httpx.get(f"{url}/metrics").text))

    # the source reads /health, /props, /slots, /metrics, /v1/models and the GGUF header: nothing is left unknown
    src = LlamaServerSource(url, timeout_s=5.0)
    try:
        r = src.poll()
    finally:
        src.close()
    assert r.reasons == {}, r.reasons
    assert (r.backend, r.state, r.total_slots, r.metrics_enabled) == ("llama-server", "ok", 1, True)
    assert r.server_version == "b0-unknown"  # the wheel is built without a build number
    assert r.model is not None and r.model.shape is not None and r.model.shape_source == "gguf"
    assert (r.model.arch, r.model.n_ctx_train, r.model.n_embd) == ("llama", 8192, 128)
    assert r.model.n_params and r.model.weight_bytes and r.model.quantization
    assert r.metrics["tokens_predicted_total"] == predicted and r.metrics["n_decode_total"] >= predicted
    assert (r.config.n_ctx_total, r.config.n_parallel, r.config.kv_unified) == (2048, 1, False)
    assert r.config.provenance["n_ctx_total"] == "command_line"  # read from the server process's own argv


def test_once_json_reads_the_real_server(llama_server: Callable[..., RealLlamaServer]) -> None:
    server = llama_server("llama", FLAGS)
    rc, out, err = _run_kvmon("once", server.url, "--json", "--interval", "0", "--log", str(server.log_path))
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["backend"] == "llama-server" and doc["connection"]["status"] == "connected"
    m = doc["model"]
    assert (m["arch"], m["n_ctx"], m["n_slots"], m["kv_type_k"], m["flash_attn"]) == ("llama", 2048, 1, "f16", "on")
    assert m["kv_allocated_bytes"] == 2 * 1024 * 1024  # llama_kv_cache: size = 2.00 MiB
    assert doc["provenance"]["kv_allocated_bytes"] == "log"
    assert doc["provenance"]["n_ctx"] == "measured"
    # started with -m /full/path and no --alias: the server calls its model by that path, kvmon by general.name
    assert m["server_name"].startswith("/") and m["server_name"].endswith(".gguf")
    assert m["name"] == "tiny-llama"


def test_wrong_api_key_exits_2_and_the_right_one_reads(llama_server: Callable[..., RealLlamaServer]) -> None:
    server = llama_server("llama", [*FLAGS, "--api-key", "secret-key-1"])
    rc, out, err = _run_kvmon("once", server.url, "--json", "--interval", "0", "--api-key", "wrong-key")
    assert rc == 2 and json.loads(out)["verdict"]["state"] == "Key rejected" and "wrong-key" not in out
    assert err.count("\n") == 1 and err.startswith("kvmon: API key rejected") and "wrong-key" not in err
    rc, out, err = _run_kvmon("once", server.url, "--json", "--interval", "0")
    assert rc == 2 and err.startswith("kvmon: ")
    rc, out, err = _run_kvmon("once", server.url, "--json", "--interval", "0", "--api-key", "secret-key-1")
    assert rc == 0, err
    assert "secret-key-1" not in out and json.loads(out)["connection"]["status"] == "connected"


LONG_REPLY = {"prompt": "hello world", "n_predict": 30000, "ignore_eos": True}


def _kvmon_n_decoded(monitor: Monitor | GroupMonitor) -> tuple[int, int]:
    """(task, tokens decoded) of slot 0 as kvmon's last poll read them: the server's count at kvmon's instant."""
    assert isinstance(monitor, Monitor)
    reading = monitor.last_reading
    assert reading is not None and reading.slots and reading.slots[0].n_decoded is not None
    return reading.slots[0].id_task or 0, reading.slots[0].n_decoded


def test_decode_rate_matches_the_server_within_3_percent(llama_server: Callable[..., RealLlamaServer]) -> None:
    """kvmon's decode speed over its window (the tokens /slots said at its two polls, over its own clock) against
    the server's own timing of the same tokens (each streamed chunk says the tokens so far and the ms they took)."""
    server = llama_server("llama", ["-c", "32768", "-np", "1", "--metrics"])
    monitor = open_monitor(server.url, gpu=False, host=False, timeout_s=KVMON_TIMEOUT_S)
    with monitor, TimedReply(server.url, LONG_REPLY) as reply:
        reply.wait_tokens(500)
        c0 = time.monotonic()
        first = monitor.poll()
        poll0_s = time.monotonic() - c0
        task0, n0 = _kvmon_n_decoded(monitor)
        time.sleep(4.0)
        c1 = time.monotonic()
        second = monitor.poll()
        poll1_s = time.monotonic() - c1
        task1, n1 = _kvmon_n_decoded(monitor)
        server_rate = reply.rate_between(n0, n1)
        assert not reply.done.is_set() and task0 == task1, "the generation ended inside the window"
    assert first.decode_tok_s is None  # one poll sets the baseline
    assert second.decode_tok_s is not None and second.decode_rate_source == "slots"
    # kvmon stamps each poll's /slots read at the middle of its request; the server counted the tokens somewhere
    # inside it (at most half the poll off at each end: a millisecond or two on a quiet machine, tens of ms on a
    # busy one), and between two tokens (one token's time at each end): that much is added to the 3 %
    window_s = (n1 - n0) / server_rate
    timing = (poll0_s / 2 + poll1_s / 2 + 2 * reply.token_s()) / window_s
    assert second.decode_tok_s == pytest.approx(server_rate, rel=0.03 + timing), (second.decode_tok_s, server_rate,
                                                                                  timing)


def test_a_restarted_server_gives_no_negative_or_spiking_rate(
        llama_server: Callable[..., RealLlamaServer]) -> None:
    first = llama_server("llama", ["-c", "32768", "-np", "1", "--metrics"])
    monitor = open_monitor(first.url, gpu=False, host=False, timeout_s=KVMON_TIMEOUT_S)
    with monitor:
        with TimedReply(first.url, LONG_REPLY) as old:
            old.wait_tokens(2000)  # counters well above where the next server's will be
            for _ in range(3):
                assert (monitor.poll().decode_tok_s or 0) >= 0
                time.sleep(0.2)
        first.stop()
        assert monitor.poll().connection.status.value != "connected"
        second = llama_server("llama", ["-c", "32768", "-np", "1", "--metrics", "--port", str(first.port)])
        assert second.url == first.url
        after: list[float | None] = []
        counts: list[int] = []  # the new server's tokens at each poll, as kvmon read them
        with TimedReply(second.url, LONG_REPLY) as reply:
            reply.wait_tokens(50)
            for _ in range(6):
                after.append(monitor.poll().decode_tok_s)
                counts.append(_kvmon_n_decoded(monitor)[1])
                time.sleep(0.5)
            # the new server's own pace over each of kvmon's windows, by its clock
            paces = [reply.rate_between(a, b) for a, b in itertools.pairwise(counts) if b > a]
    measured = [r for r in after if r is not None]
    assert measured, after  # the new server's decoding is seen again
    assert all(r >= 0 for r in measured), after
    # kvmon's rate is a smoothed average of such paces; a counter reset read as progress (the old server's 2,000+
    # tokens inside one half-second window) would add 4,000 tok/s or more. The factor 2 leaves room for kvmon's own
    # timing of its windows on a loaded machine (its requests served late), which the server's clock does not share
    assert paces and all(r <= 2 * max(paces) for r in measured), (after, paces)


@pytest.mark.parametrize(("flags", "metrics", "live", "reasons"), [
    (["-c", "2048", "-np", "1"], False, "slots",
     {"metrics": "/metrics is off on this server (start it with --metrics for more counters)"}),
    (["-c", "2048", "-np", "1", "--no-slots", "--metrics"], True, "metrics", {}),
])
def test_endpoints_turned_off_are_said_not_failed(llama_server: Callable[..., RealLlamaServer], flags: list[str],
                                                  metrics: bool, live: str, reasons: dict[str, str]) -> None:
    server = llama_server("llama", flags)
    src = LlamaServerSource(server.url, timeout_s=5.0)
    try:
        r = src.poll()
    finally:
        src.close()
    assert (r.state, r.metrics_enabled, r.live_rate_source) == ("ok", metrics, live)
    assert r.reasons == reasons
    assert len(r.slots) == (0 if "--no-slots" in flags else 1)


LONG_PROMPT = " ".join(f"word{i}" for i in range(750))  # ~6,000 tokens: a couple of seconds on one thread


def _long_prompt_server(llama_server: Callable[..., RealLlamaServer], *flags: str) -> RealLlamaServer:
    """A one-slot server with small batches and /metrics: a long prompt takes it a couple of seconds."""
    return llama_server("llama", ["-c", "8192", "-np", "1", "-b", "256", "-ub", "256", "--metrics", *flags])


# A loaded machine may poll too seldom while one prompt is read (the server slows less than the polling): the prompt
# is sent again (nothing cached), until kvmon has seen each phase, this many times at most
MAX_ASKS = 3


def _asker(server: RealLlamaServer, n_predict: int, replies: list[int]) -> threading.Thread:
    """A thread that sends the long prompt once (nothing cached) and keeps the reply's status in ``replies``."""
    def ask() -> None:
        replies.append(httpx.post(f"{server.url}/completion", json={"prompt": LONG_PROMPT, "n_predict": n_predict,
                                                                    "cache_prompt": False}, timeout=300).status_code)

    return threading.Thread(target=ask)


def test_a_long_prompt_is_processing_not_idle(llama_server: Callable[..., RealLlamaServer]) -> None:
    """While the real server reads a ~6,000-token prompt (a couple of seconds on one thread) its slot works and no
    token is decoded yet: kvmon says "processing", with the prompt's speed where measured, never "idle"; then it
    decodes."""
    from kvmon.core.units import fmt_tok_s
    from kvmon.gui.fmt import hero

    server = _long_prompt_server(llama_server)
    replies: list[int] = []
    monitor = open_monitor(server.url, gpu=False, host=False, timeout_s=KVMON_TIMEOUT_S)
    seen: list[tuple[Activity, float | None, float | None, bool, str]] = []
    with monitor:
        monitor.poll()
        for _ in range(MAX_ASKS):
            asker = _asker(server, 300, replies)
            asker.start()
            while asker.is_alive():
                s = monitor.poll()
                seen.append((s.activity, s.decode_tok_s, s.prefill_tok_s, any(sl.processing for sl in s.slots),
                             hero(s).prompt))
                time.sleep(0.15)
            asker.join()
            working = [x for x in seen if x[3] and x[1] is None]  # the slot works, no decode speed yet: its prompt
            if len(working) >= 2 and any(pf is not None for _a, _d, pf, _b, _w in working) and any(
                    a is Activity.DECODING for a, *_ in seen):
                break
    assert replies and all(r == 200 for r in replies)
    assert len(working) >= 2, seen
    assert all(a is Activity.PROCESSING for a, *_ in working), seen
    assert not any(a is Activity.IDLE and busy for a, _d, _p, busy, _w in seen), seen
    prompted = [(pf, words) for _a, _d, pf, _b, words in working if pf is not None]
    assert prompted and all(words == f"prompt {fmt_tok_s(pf)}" for pf, words in prompted), prompted
    assert any(a is Activity.DECODING for a, *_ in seen), seen


def test_without_slots_a_long_prompt_is_processing_by_the_servers_own_count(
        llama_server: Callable[..., RealLlamaServer]) -> None:
    """``--no-slots``: no slot says whether a request runs, but /metrics' ``requests_processing`` does. While the
    real server reads a long prompt (no token decoded yet) kvmon says "processing" ("busy": the prompt's counters
    move only when it is read), never "idle"; once the reply is done, "idle"."""
    server = _long_prompt_server(llama_server, "--no-slots")
    monitor = open_monitor(server.url, gpu=False, host=False, timeout_s=KVMON_TIMEOUT_S)
    assert isinstance(monitor, Monitor)
    undecoded: list[tuple[Activity, float | None, str, float]] = []
    decoding = 0
    with monitor:
        first = monitor.poll()
        assert not first.slots and first.activity is not Activity.PROCESSING
        for _ in range(MAX_ASKS):
            seen = _watch_one_long_prompt(server, monitor)
            undecoded += [x for x in seen if x[1] is None]
            decoding += sum(1 for a, *_ in seen if a is Activity.DECODING)
            if len(undecoded) >= 4 and decoding:
                break
    assert len(undecoded) >= 4, undecoded  # the prompt takes ~2 s here
    assert decoding
    assert all(a is Activity.PROCESSING and words in ("Starting", "Reading prompt")
               for a, _d, words, _n in undecoded), undecoded


def _watch_one_long_prompt(server: RealLlamaServer, monitor: Monitor) -> list[tuple[Activity, float | None, str,
                                                                                       float]]:
    """kvmon's polls while a ``--no-slots`` server reads the long prompt and replies: never "idle" while it works,
    every decode speed shown a decode speed, "idle" once it is done; (activity, decode speed, its words,
    n_decode_total) of each poll from the request's arrival to its end."""
    from kvmon.core.verdict import decide

    seen: list[tuple[Activity, float | None, str, float]] = []
    with TimedReply(server.url, {"prompt": LONG_PROMPT, "n_predict": 200, "cache_prompt": False}) as reply:
        while not reply.done.is_set():
            s = monitor.poll()
            if not reply.done.is_set():
                assert monitor.last_reading is not None
                seen.append((s.activity, s.decode_tok_s, decide(s).state,
                             monitor.last_reading.metrics["n_decode_total"]))
            time.sleep(0.15)
    after = [monitor.poll() for _ in range(2)][-1]
    assert monitor.last_reading is not None
    n_decode_end = monitor.last_reading.metrics["n_decode_total"]
    assert reply.status == 200 and reply.final is not None and reply.final["predicted_n"] == 200
    assert after.activity is Activity.IDLE and decide(after).state == "Idle"
    while seen and seen[0][0] is Activity.IDLE:  # polls before the request reached the server
        seen.pop(0)
    assert not any(a is Activity.IDLE for a, *_ in seen), seen
    # every decode speed shown is a decode speed, where the prompt's batches (~8 a second) were shown as "decode
    # ~5 tok/s" before: within a factor of two of the server's own speed over kvmon's windows since decoding began.
    # n_decode_total counts a call per prompt batch, then one per token after the first: tokens = count - offset
    offset = n_decode_end - reply.final["predicted_n"]
    counts = [n - offset for *_x, n in seen]
    for i, (_a, d, _w, _n) in enumerate(seen):
        if d is None:
            continue
        windows = [(k0, k1) for k0, k1 in itertools.pairwise(counts[:i + 1]) if k0 >= reply.points[0][0] and k1 > k0]
        rates = [reply.rate_between(k0, k1) for k0, k1 in windows]
        assert rates and min(rates) / 2 <= d <= 2 * max(rates), (d, rates, seen)
    return seen


def test_replies_shorter_than_a_poll_show_the_servers_own_decode_speed_and_no_false_reply_times(
        llama_server: Callable[..., RealLlamaServer]) -> None:
    """Replies of 256 tokens one after another (tens of milliseconds each here): no slot counter spans two polls, so
    before, kvmon said "busy" at every poll of a server generating thousands of tokens a second. The speed shown is
    now the server's own timing of the replies that ended, and it lies among the speeds the server gave each
    reply."""
    from kvmon.core.units import fmt_tok_s
    from kvmon.gui.fmt import hero
    from kvmon.gui.panels.latency import latency_text

    server = llama_server("llama", FLAGS)
    stop, speeds = threading.Event(), []

    def ask() -> None:
        with httpx.Client(timeout=60) as client:
            while not stop.is_set():
                body = {"prompt": "hello world", "n_predict": 256, "ignore_eos": True, "cache_prompt": False}
                speeds.append(client.post(f"{server.url}/completion", json=body).json()["timings"]
                              ["predicted_per_second"])

    # three askers on the one slot: the next reply waits in the server's queue while one runs, so the slot works
    # through every poll however late this machine lets an asker send its next request
    askers = [threading.Thread(target=ask, daemon=True) for _ in range(3)]
    seen = []
    with open_monitor(server.url, gpu=False, host=False, timeout_s=KVMON_TIMEOUT_S) as monitor:
        monitor.poll()
        for asker in askers:
            asker.start()
        for i in range(40):  # 20 polls, more while fewer than 3 found a reply running (a loaded machine)
            time.sleep(0.37)
            s = monitor.poll()
            # a request runs now, and several ended since the last poll (tens of them a second, none spanning two)
            seen.append((s.slots[0].processing, s.activity, s.decode_tok_s, s.decode_rate_source,
                         hero(s).number))
            last = s
            if i >= 19 and sum(1 for x in seen if x[0]) >= 3:
                break
        stop.set()
        for asker in askers:
            asker.join(60)
    fresh = [x for x in seen if x[0]]
    assert len(speeds) >= 20 and len(fresh) >= 2, seen
    assert all(a is Activity.DECODING and src == "replies" and words == fmt_tok_s(d)
               for _f, a, d, src, words in fresh), seen
    # each shown speed is a mean over whole replies: within the fastest and the slowest the server timed
    shown = [d for _f, _a, d, src, _w in seen if src == "replies"]
    assert all(min(speeds) * 0.99 <= d <= max(speeds) * 1.01 for d in shown), (shown, min(speeds), max(speeds))
    # the replies line: what the counters added up between two polls was several replies, so no first-token time
    # (it was the sum of their prompts' times, several of them) and a count that is a lower bound; the time per token is
    # the server's, within the replies' own
    lat = last.latency
    assert lat is not None and lat.replies_at_least and lat.itl_p50_s is not None
    # every poll's counters held several replies (more tokens than the slot holds, or one ending while the next ran):
    # no sum of their prompts' times is a first-token time
    assert lat.ttft_count == 0, lat
    assert 0.99 / max(speeds) <= lat.itl_p50_s <= 1.01 / min(speeds), (lat, min(speeds), max(speeds))
    line, tip = latency_text(last)
    assert f"≥ {lat.replies} replies" in line and "faster than kvmon polls" in tip, (line, tip)
    assert line.startswith("first token not split per reply · "), line
