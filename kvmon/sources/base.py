"""The interfaces every source implements: a model server (llama-server, Ollama, ...), the GPUs, the host.

A server poll returns an immutable, timestamped ``ServerReading`` or raises ``SourceError`` carrying a typed
``SourceFailure`` with a one-line reason; sources never return half-built objects or raise anything else. GPU and
host polls never raise: what they cannot read is ``None`` with a reason in the reading. ``kvmon.app.monitor.Monitor``
is typed on these, and ``tests/sources/test_base.py`` runs one contract against every server source.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol, runtime_checkable

from kvmon.core.readings import GpuSetReading, HostReading, ServerReading
from kvmon.core.serving import ListedModel, ModelListing


@runtime_checkable
class ServerSource(Protocol):
    """A model server kvmon can poll: ``backend`` names it, ``display_url`` never carries credentials."""

    backend: str
    display_url: str

    def poll(self) -> ServerReading:
        """Read the server once; raises ``SourceError`` when nothing could be read."""
        ...

    def close(self) -> None:
        """Release connections and files."""
        ...


@runtime_checkable
class ModelListSource(Protocol):
    """A server that serves several models, one child server each (llama-server's router mode, llama-swap).

    ``list_models`` is one cheap request per poll and never loads, wakes or starts anything; ``model_source`` gives a
    ``ServerSource`` for one running model (raises ``SourceError`` when that model cannot be read from here).
    """

    backend: str
    display_url: str
    kind: str  # kvmon.core.serving.ROUTER | LLAMA_SWAP

    def list_models(self) -> ModelListing:
        """The models and their status now; raises ``SourceError`` when the server cannot be read."""
        ...

    def model_source(self, model: ListedModel) -> ServerSource:
        """A source for one running model."""
        ...

    def close(self) -> None:
        """Release connections and threads."""
        ...


@runtime_checkable
class GpuSource(Protocol):
    """The machine's GPUs; ``server_pids`` lets it split per-process memory into the server's and everyone else's."""

    def poll(self, server_pids: Collection[int] = ()) -> GpuSetReading:
        """Read every GPU now (a machine without one says so in ``unavailable_reason``)."""
        ...

    def close(self) -> None:
        """Release the driver."""
        ...


@runtime_checkable
class HostSource(Protocol):
    """The host: RAM, swap, the server's resident memory, host memory bandwidth."""

    def poll(self, server_pids: Collection[int] = ()) -> HostReading:
        """Read the host now."""
        ...

    def close(self) -> None:
        """Release what the source holds."""
        ...


@runtime_checkable
class BandwidthProbe(Protocol):
    """A host source that can measure its own memory bandwidth once (``kvmon.sources.host.HostSource``)."""

    def probe_due(self) -> bool:
        """Whether the measurement is wanted now (allowed, nothing known yet, not tried)."""
        ...

    def measure_bandwidth(self) -> float:
        """Measure now (well under a second), remember it for this machine and return bytes/s."""
        ...
