"""Every backend in ``kvmon.sources.backends.ALL`` is wired all the way: its source, sweep and summary import,
detection has a probe for it, the simulator serves it in a built-in scenario (and detection names that server as
it), and the source contract or the hostile-input matrix runs against it. A backend added to ``ALL`` with a step
left out fails here, naming the step."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hostile_matrix import BACKENDS as HOSTILE_BACKENDS

from kvmon.app.demo import scenario_backend
from kvmon.core.backend import Backend
from kvmon.sim.catalog import names
from kvmon.sim.multi_scenarios import get_multi_scenario
from kvmon.sim.scenarios import get_scenario
from kvmon.sources import backends, detect

TESTS = Path(__file__).resolve().parents[1]
READ = [pytest.param(b, id=b.name) for b in backends.ALL if b.source is not None]


def _scenario(name: str) -> object:
    return get_multi_scenario(name) or get_scenario(name)


def _scenarios_of(backend: Backend) -> list[str]:
    """The built-in scenarios whose simulated server answers as ``backend``."""
    return [n for n in names() if scenario_backend(_scenario(n)) is backend]


@contextmanager
def _simulated(name: str) -> Iterator[str]:
    """The built-in scenario ``name`` served on 127.0.0.1: its URL while it runs."""
    from kvmon.sim.multi import MultiSim
    from kvmon.sim.server import SimServer

    multi = get_multi_scenario(name)
    sim = MultiSim(multi) if multi is not None else SimServer(name)
    url = sim.start()
    try:
        yield url
    finally:
        sim.stop()


def test_names_are_unique_and_each_is_found_by_name() -> None:
    assert len({b.name for b in backends.ALL}) == len(backends.ALL)
    assert all(backends.by_name(b.name) is b for b in backends.ALL)


@pytest.mark.parametrize("backend", READ)
def test_its_source_sweep_and_summary_import(backend: Backend) -> None:
    cls = detect.source_class(backend)
    assert callable(getattr(cls, "poll", None)) or callable(getattr(cls, "list_models", None)), (
        f"{backend.source} is neither a ServerSource nor a ModelListSource (kvmon.sources.base)")
    for ref in (backend.sweep, backend.summary):
        if ref is not None:
            module, _, name = ref.partition(":")
            assert callable(getattr(importlib.import_module(module), name, None)), f"{ref} does not exist"


@pytest.mark.parametrize("backend", [pytest.param(b, id=b.name) for b in backends.ALL])
def test_detection_has_a_probe_for_it(backend: Backend) -> None:
    assert backend in {b for b, _probe in detect.PROBES}, (
        f"{backend.name}: no probe in kvmon.sources.detect.PROBES, so a running {backend.label} is never recognised")


@pytest.mark.parametrize("backend", READ)
def test_the_simulator_serves_it_in_a_scenario(backend: Backend) -> None:
    assert _scenarios_of(backend), (
        f"{backend.name}: no built-in scenario (kvmon.sim.scenarios / multi_scenarios) serves it, so --demo, the "
        "stories and the source contract never run it")


@pytest.mark.parametrize("name", names())
def test_every_scenario_serves_a_backend_kvmon_reads(name: str) -> None:
    backend = scenario_backend(_scenario(name))
    assert backend in backends.ALL and backend.source is not None, f"{name} serves {backend.name!r}"


@pytest.mark.parametrize("backend", READ)
def test_detection_names_its_simulated_server(backend: Backend) -> None:
    scenarios = _scenarios_of(backend)
    if not scenarios:
        pytest.fail(f"{backend.name}: no scenario to detect it on (see the test above)")
    with _simulated(scenarios[0]) as url:
        assert detect.identify(url, None, 3.0).backend == backend


def _reads_one_server(backend: Backend) -> bool:
    """A ServerSource (one model of its own), not a ModelListSource (a router, llama-swap)."""
    return not callable(getattr(detect.source_class(backend), "list_models", None))


def _contract_sources() -> dict[str, object]:
    """The source contract's parametrisation (``SERVER_SOURCES`` of the contract suite, tests/sources/test_base.py)."""
    path = TESTS / "sources" / "test_base.py"
    spec = importlib.util.spec_from_file_location("source_contract_for_backends", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict(module.SERVER_SOURCES)


@pytest.mark.parametrize("backend", [p for p in READ if _reads_one_server(p.values[0])])
def test_a_server_source_runs_the_source_contract(backend: Backend) -> None:
    assert backend.name in _contract_sources(), (
        f"{backend.name}: add it to SERVER_SOURCES in tests/sources/test_base.py (its scenario and how to open it)")


@pytest.mark.parametrize("backend", READ)
def test_the_hostile_matrix_runs_against_it(backend: Backend) -> None:
    matrix_name = "router" if backend is backends.ROUTER else backend.name  # the matrix's short name for it
    assert matrix_name in HOSTILE_BACKENDS, (
        f"{backend.name}: add its endpoints and a rig to BACKENDS in tests/hostile_matrix.py")
