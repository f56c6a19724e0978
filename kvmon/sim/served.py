"""What a simulated backend's HTTP API reads of the server it answers for (``kvmon.sim.server.SimServer``).

A Protocol, so that the API modules (``llama_api``, ``ollama_api``) depend on the simulation, not on the server
that routes requests to them: the server imports its API, never the other way round.
"""

from __future__ import annotations

import threading
from typing import Protocol

from kvmon.sim.clock import SimClock
from kvmon.sim.engine import SimEngine
from kvmon.sim.scenarios import Scenario


class ServedSimulation(Protocol):
    """The simulated server as its API sees it: the story, its clock and engine, the model file, the stop flag."""

    scenario: Scenario
    clock: SimClock
    engine: SimEngine
    model_path: str
    stopping: threading.Event
