"""Scenarios of servers that serve several models: llama-server's router mode and llama-swap.

Each model is an ordinary single-model scenario (``kvmon.sim.scenarios.Scenario``: its preset, GPU, context and
chat), started by the serving process when the plan (or a client) asks for it; the plan is what the user does:
load a model (and chat with it), unload one. All models share the first model's GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvmon.sim.scenarios import ChatScript, KeyMoment, Scenario

ROUTER = "router"
LLAMA_SWAP = "llama-swap"


@dataclass(frozen=True)
class ServedSpec:
    """One model the serving process knows: its own server's scenario, how long it takes to load, whether it fails."""

    name: str
    scenario: Scenario
    load_s: float = 5.0
    fail_after_s: float | None = None  # the model server exits with status 1 this long after its start


@dataclass(frozen=True)
class MultiScenario:
    """A router or llama-swap with its models and what the user does, in simulated seconds."""

    name: str
    description: str
    kind: str  # ROUTER | LLAMA_SWAP
    models: tuple[ServedSpec, ...]
    plan: tuple[tuple[float, str, str], ...] = ()  # (t_s, "load" | "unload", model)
    sleep_idle_s: float | None = None  # router: --sleep-idle-seconds for every model (None: never)
    ttl_s: float | None = None  # llama-swap: unload a model idle this long (None: never)
    models_max: int = 4  # router: --models-max
    host_bandwidth_bytes_per_s: float = 64e9
    key_moments: tuple[KeyMoment, ...] = ()

    @property
    def backend(self) -> str:
        """What the HTTP front answers as (a router is a llama-server; llama-swap is its own server)."""
        return "llama-server" if self.kind == ROUTER else LLAMA_SWAP

    def spec(self, name: str) -> ServedSpec | None:
        return next((m for m in self.models if m.name == name), None)


def _model(name: str, preset_keys: tuple[str, ...], n_ctx: int, anchors: tuple[tuple[int, float], ...],
           script: ChatScript, **kw: object) -> Scenario:
    return Scenario(name=name, description=name, preset_keys=preset_keys, model_alias=name, gpu_name="RTX 4090",
                    n_ctx=n_ctx, decode_anchors=anchors, script=script, **kw)  # type: ignore[arg-type]  # Scenario's own fields


_QWEN = _model("qwen3-8b", ("qwen3-8b",), 32768, ((0, 128.0), (32768, 74.0)),
               ChatScript(n_turns=8, first_prompt_tokens=900, target_context_tokens=9000, generated_tokens=350,
                          think_s=4.0, start_delay_s=1.0, loop=False), prefill_tok_s_empty=8000.0)
_GEMMA = _model("gemma-3-12b", ("gemma-3-12b",), 16384, ((0, 78.0), (16384, 61.0)),
                ChatScript(n_turns=40, first_prompt_tokens=1200, target_context_tokens=15000, generated_tokens=300,
                           think_s=6.0, start_delay_s=1.0), prefill_tok_s_empty=5200.0, type_k="q8_0", type_v="q8_0")
_GPTOSS = _model("gpt-oss-20b", ("gpt-oss-20b",), 32768, ((0, 150.0), (32768, 120.0)),
                 ChatScript(n_turns=0, first_prompt_tokens=16, target_context_tokens=16, generated_tokens=16,
                            think_s=1.0, loop=False))

MULTI_SCENARIOS: dict[str, MultiScenario] = {
    s.name: s
    for s in (
        MultiScenario(
            name="router",
            description="llama-server in router mode on an RTX 4090: qwen3-8b loads (with progress) and is chatted "
            "with, then gemma-3-12b is loaded and takes over the chat; qwen3-8b falls asleep when idle, a broken "
            "model file fails to load, gpt-oss-20b stays unloaded",
            kind=ROUTER,
            models=(ServedSpec("qwen3-8b", _QWEN, load_s=8.0), ServedSpec("gemma-3-12b", _GEMMA, load_s=10.0),
                    ServedSpec("gpt-oss-20b", _GPTOSS),
                    ServedSpec("broken-model", replace(_GPTOSS, name="broken-model", model_alias="broken-model"),
                               load_s=30.0, fail_after_s=2.0)),
            plan=((2.0, "load", "qwen3-8b"), (60.0, "load", "gemma-3-12b"), (75.0, "load", "broken-model")),
            sleep_idle_s=30.0,
            key_moments=(KeyMoment("the broken model failed to load", 85.0),),
        ),
        MultiScenario(
            name="llama-swap",
            description="llama-swap with three models on an RTX 4090, one at a time: qwen3-8b starts and is "
            "chatted with, then a request for gemma-3-12b swaps it out; a ttl of 120 s stops an idle model",
            kind=LLAMA_SWAP,
            models=(ServedSpec("qwen3-8b", _QWEN, load_s=6.0), ServedSpec("gemma-3-12b", _GEMMA, load_s=8.0),
                    ServedSpec("gpt-oss-20b", _GPTOSS)),
            plan=((2.0, "load", "qwen3-8b"), (70.0, "load", "gemma-3-12b")),
            ttl_s=120.0,
            key_moments=(KeyMoment("swapping to gemma-3-12b", 71.0),),
        ),
    )
}


def get_multi_scenario(name: str) -> MultiScenario | None:
    """The router or llama-swap scenario called ``name``, or None (then it may be a single-model one)."""
    return MULTI_SCENARIOS.get(name)
