"""The simulators' prompt caches as the servers keep theirs, read by kvmon from each backend's own figures: vLLM's
prefix-cache counters, Ollama's final chunk through kvmon proxy with its llama-server child's slots."""

from __future__ import annotations

import threading
import time

import httpx

from kvmon.core.analysis import Analyzer
from kvmon.proxy.server import ProxyServer
from kvmon.sim.server import SimServer
from kvmon.sources.ollama.source import OllamaSource
from kvmon.sources.vllm.source import VllmSource

SYSTEM = "You are helpful. " * 40  # a long system prompt: its blocks stay cached while it does not change
WORDS = "Tell me more about the tides and the moon, in detail please. " * 30


def _chat(client: httpx.Client, path: str, system: str, turns: int, model: str) -> None:
    history = [{"role": "system", "content": system}]
    for i in range(turns):
        history.append({"role": "user", "content": f"{i}: {WORDS}"})
        body = {"model": model, "messages": history, "max_tokens": 16, "stream": False,
                "options": {"num_predict": 16}}
        reply = client.post(path, json=body).json()
        text = reply["message"]["content"] if "message" in reply else reply["choices"][0]["message"]["content"]
        history.append({"role": "assistant", "content": text})


def test_vllm_prefix_cache_counters_count_a_growing_conversation() -> None:
    with SimServer("vllm", autoplay=False, speed=20.0) as sim:
        src = VllmSource(sim.url)
        a = Analyzer()
        try:
            a.update(src.poll())
            with httpx.Client(base_url=sim.url, timeout=60) as client:
                _chat(client, "/v1/chat/completions", SYSTEM, 3, sim.scenario.model_alias)
            s = a.update(src.poll())
        finally:
            src.close()
        c = sim.engine.epoch_at(sim.clock.now()).counters
    v = s.prompt_cache
    assert v is not None and v.source == "the server's counters"
    assert v.reused_tokens == c["prompt_tokens_cached_total"] > 0 and v.reused_tokens % 16 == 0  # whole blocks
    assert v.reread_tokens == c["prompt_tokens_total"]


def test_ollamas_final_chunk_and_child_slots_through_the_proxy() -> None:
    with SimServer("ollama-partial", autoplay=False, speed=4.0, ollama_child=True) as sim:
        proxy = ProxyServer(sim.url, port=0, clock=sim.clock.now)
        proxy.start()
        src = OllamaSource(sim.url, proxy_url=proxy.url, timeout_s=3.0)
        a = Analyzer()
        done = threading.Event()

        def talk() -> None:
            with httpx.Client(base_url=proxy.url, timeout=120) as client:
                _chat(client, "/api/chat", SYSTEM, 3, "gemma3:27b")
            done.set()

        try:
            worker = threading.Thread(target=talk, daemon=True)
            worker.start()
            snaps = []
            while not done.is_set():
                snaps.append(a.update(src.poll()))
                time.sleep(0.05)
            worker.join(5)
            time.sleep(0.3)
            snaps.append(a.update(src.poll()))
        finally:
            src.close()
            proxy.stop()
        c = sim.engine.epoch_at(sim.clock.now()).counters
    v = snaps[-1].prompt_cache
    assert v is not None and v.source == "each reply's timings" and v.reads == 3
    assert v.reused_tokens == c["prompt_tokens_cached_total"] > 0  # the child's slots said what was reused
    assert v.reread_tokens == c["prompt_tokens_total"]
    assert v.reread_s is not None and v.reread_s > 0


def test_llama_servers_slot_reuses_a_stable_prefix_and_reads_a_changed_system_prompt_whole() -> None:
    from kvmon.sources.llamacpp.source import LlamaServerSource

    with SimServer("agent-cache-miss", autoplay=False, speed=50.0) as sim:
        src = LlamaServerSource(sim.url)
        a = Analyzer()
        try:
            a.update(src.poll())
            with httpx.Client(base_url=sim.url, timeout=60) as client:
                _chat(client, "/v1/chat/completions", SYSTEM, 3, sim.scenario.model_alias)
                stable = a.update(src.poll()).prompt_cache
                # the same conversation again with its system prompt's start changed: only the template's tag before
                # the change is cached, the rest is read again
                history = [{"role": "system", "content": "Now: 12:01. " + SYSTEM},
                           {"role": "user", "content": WORDS}]
                reply = client.post("/v1/chat/completions", json={"model": sim.scenario.model_alias,
                                                                  "messages": history, "max_tokens": 16}).json()
            changed = a.update(src.poll()).prompt_cache
        finally:
            src.close()
        c = sim.engine.epoch_at(sim.clock.now()).counters
    assert stable is not None and stable.reused_tokens > 0  # turns 2 and 3 reused the system prompt and turn 1
    cached = reply["timings"]["cache_n"]
    assert cached <= 4 and reply["usage"]["prompt_tokens_details"]["cached_tokens"] == cached
    assert changed is not None and changed.last_reused_tokens == cached
    assert changed.last_reread_tokens == reply["timings"]["prompt_n"] > 0
    assert (changed.reread_tokens, changed.reused_tokens) == (c["prompt_tokens_total"],
                                                             c["prompt_tokens_cached_total"])
