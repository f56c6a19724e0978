"""The one interface every model-server source implements (llama-server, Ollama, ...).

A poll returns an immutable, timestamped ``ServerReading`` or raises ``SourceError`` carrying a typed
``SourceFailure`` with a one-line reason; sources never return half-built objects or raise anything else.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from kvmon.core.readings import ServerReading


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
