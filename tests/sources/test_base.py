"""The source contract (``kvmon.sources.base``), run against every source on the simulator over real HTTP.

Each server source (llama-server, Ollama, vLLM, LM Studio) must: say its backend; show a URL without credentials;
return an immutable, timestamped ServerReading whose unknowns are None with a reason; raise only SourceError, typed,
for a server it cannot read (gone, key refused, garbage); and close twice without harm. The GPU and host sources must
never raise from a poll. New sources join the parametrisation and pass the same tests.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import pytest

pytest.importorskip("kvmon.sim.server")


from repo_paths import FIXTURES

from kvmon.core.readings import FailureKind, GpuSetReading, HostReading, ServerReading, SourceError
from kvmon.sim.faults import DEFAULT_API_KEY
from kvmon.sim.server import SimServer
from kvmon.sources.amdgpu import AmdGpuSource
from kvmon.sources.apple import AppleSource
from kvmon.sources.base import GpuSource, HostSource, ServerSource
from kvmon.sources.detect import open_source
from kvmon.sources.devices import DeviceSources, default_device_sources
from kvmon.sources.host import HostSource as PsutilHost
from kvmon.sources.intel_gpu import IntelGpuSource
from kvmon.sources.llamacpp.source import LlamaServerSource
from kvmon.sources.lmstudio.source import LmStudioSource
from kvmon.sources.nvml import NvmlSource
from kvmon.sources.ollama.source import OllamaSource
from kvmon.sources.vllm.source import VllmSource

# the simulated LM Studio's models folder, by port (LM Studio does not say where its model file is)
_MODELS_DIRS: dict[int, str] = {}


def _lmstudio(url: str, **kw: object) -> LmStudioSource:
    folder = _MODELS_DIRS.get(urlsplit(url).port or 0)
    return LmStudioSource(url, timeout_s=2.0, models_dir=folder, **kw)  # type: ignore[arg-type]


# backend -> (scenario, how to make its source for a URL)
SERVER_SOURCES: dict[str, tuple[str, Callable[..., ServerSource]]] = {
    "llama-server": ("seed-3090x2", lambda url, **kw: LlamaServerSource(url, timeout_s=2.0, **kw)),
    "ollama": ("ollama-partial", lambda url, **kw: OllamaSource(url, timeout_s=2.0, **kw)),
    "vllm": ("vllm", lambda url, **kw: VllmSource(url, timeout_s=2.0, **kw)),
    "lmstudio": ("lmstudio", _lmstudio),
}


@pytest.fixture(params=sorted(SERVER_SOURCES))
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _sim(backend: str, *faults: str) -> SimServer:
    sim = SimServer(SERVER_SOURCES[backend][0], speed=20.0, faults=faults, start_at_s=60.0)
    sim.start()
    if backend == "lmstudio":
        _MODELS_DIRS[sim.port] = sim.api.models_dir
    return sim


@pytest.fixture
def sim(backend: str) -> Iterator[SimServer]:
    s = _sim(backend)
    yield s
    s.stop()


def test_it_is_a_server_source_and_says_what_it_reads(backend: str, sim: SimServer) -> None:
    src = SERVER_SOURCES[backend][1](sim.url)
    try:
        assert isinstance(src, ServerSource) and src.backend == backend
        detected = open_source(sim.url, timeout_s=2.0)  # detection picks the same kind of source
        assert detected.backend == backend
        detected.close()
    finally:
        src.close()
        src.close()  # closing twice is harmless


def test_a_reading_is_immutable_timestamped_and_names_the_model(backend: str, sim: SimServer) -> None:
    src = SERVER_SOURCES[backend][1](sim.url, clock=lambda: time.monotonic() + 1e6)  # a clock of its own
    try:
        before, before_mono = time.time(), time.monotonic() + 1e6
        first, second = src.poll(), src.poll()
        after, after_mono = time.time(), time.monotonic() + 1e6
    finally:
        src.close()
    for r in (first, second):
        assert isinstance(r, ServerReading) and r.backend == backend and r.url == src.display_url
        assert before_mono <= r.t_monotonic <= after_mono  # stamped with the source's clock
        assert before - 0.5 <= r.t_wall <= after + 0.5
        assert r.model is not None and r.model.name and r.model.shape is not None
        with pytest.raises(dataclasses.FrozenInstanceError):
            r.backend = "other"  # type: ignore[misc]
    assert second.t_monotonic > first.t_monotonic


def test_unknowns_are_none_with_a_reason_never_zero(backend: str, sim: SimServer) -> None:
    src = SERVER_SOURCES[backend][1](sim.url)
    try:
        r = src.poll()
    finally:
        src.close()
    assert all(isinstance(why, str) and why for why in r.reasons.values())
    assert r.model is not None and r.model.weight_bytes != 0
    assert r.live_rate_source is not None or r.live_rate_unavailable_reason
    config = r.config
    for name in ("n_ctx_total", "n_parallel", "kv_unified", "type_k", "type_v", "flash_attn", "n_ctx_per_slot"):
        if getattr(config, name) is not None:
            assert name in config.provenance, f"{name} is set but does not say where it came from"


def test_credentials_never_show(backend: str, sim: SimServer) -> None:
    url = sim.url.replace("http://", "http://user:s3cret-pass@") + "/?token=s3cret-tok"
    src = SERVER_SOURCES[backend][1](url)
    try:
        assert "s3cret" not in src.display_url
        r = src.poll()
        assert "s3cret" not in r.url and not any("s3cret" in why for why in r.reasons.values())
    except SourceError as e:
        assert "s3cret" not in e.failure.reason
    finally:
        src.close()


def test_a_server_that_is_gone_is_a_typed_failure(backend: str) -> None:
    sim = _sim(backend)
    url = sim.url
    sim.stop()
    src = SERVER_SOURCES[backend][1](url)
    try:
        with pytest.raises(SourceError) as info:
            src.poll()
    finally:
        src.close()
    assert info.value.failure.kind in (FailureKind.UNREACHABLE, FailureKind.TIMEOUT)
    assert info.value.failure.reason


def test_a_refused_key_is_auth_rejected_and_the_right_key_reads(backend: str) -> None:
    sim = _sim(backend, "auth")
    try:
        src = SERVER_SOURCES[backend][1](sim.url)
        try:
            with pytest.raises(SourceError) as info:
                src.poll()
            assert info.value.failure.kind is FailureKind.AUTH_REJECTED
        finally:
            src.close()
        keyed = SERVER_SOURCES[backend][1](sim.url, api_key=DEFAULT_API_KEY)
        try:
            assert keyed.poll().model is not None
        finally:
            keyed.close()
    finally:
        sim.stop()


def test_garbage_bodies_raise_only_source_errors(backend: str) -> None:
    sim = _sim(backend, "garbage")
    src = SERVER_SOURCES[backend][1](sim.url)
    try:
        for _ in range(3):
            try:
                r = src.poll()
            except SourceError as e:
                assert e.failure.kind in FailureKind and e.failure.reason
            else:
                assert isinstance(r, ServerReading) and r.reasons  # what could not be read says why
    finally:
        src.close()
        sim.stop()


# --------------------------------------------------------------------------- GPU and host sources


def test_gpu_and_host_sources_never_raise_from_a_poll() -> None:
    sim = SimServer("seed-3090x2", autoplay=False)
    try:
        fixtures = FIXTURES
        apple = fixtures / "apple" / "sysctl-02-m4max-64gb-macos15-archspec.txt"

        def recorded_mac(argv: object) -> str:  # answers every macOS tool from one recorded sysctl output
            return apple.read_text()

        gpus: list[GpuSource] = [
            NvmlSource(nvml=sim.nvml), NvmlSource(),  # the simulated GPUs; this machine's
            AmdGpuSource(fixtures / "sysfs" / "rx6900xt"), AmdGpuSource(), IntelGpuSource(fixtures / "sysfs" / "b580"),
            IntelGpuSource(), AppleSource(run=recorded_mac, metal=None, platform="darwin"), AppleSource(),
            DeviceSources([NvmlSource(nvml=sim.nvml), AmdGpuSource(fixtures / "sysfs" / "phoenix")]),
            default_device_sources(),
        ]
        hosts: list[HostSource] = [PsutilHost(), PsutilHost(50e9)]
        for g in gpus:
            assert isinstance(g, GpuSource)
            reading = g.poll(sim.server_pids)
            assert isinstance(reading, GpuSetReading)
            assert reading.gpus or reading.unavailable_reason  # GPUs, or why there are none
            g.close()
            g.close()
        for h in hosts:
            assert isinstance(h, HostSource)
            reading = h.poll(sim.server_pids)
            assert isinstance(reading, HostReading) and reading.ram_total_bytes
            h.close()
    finally:
        sim.stop()
