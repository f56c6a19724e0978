"""A poll that read no server: the one mapping from failure to connection status, and the one Snapshot for it.

Sources raise typed failures (``kvmon.core.readings.SourceFailure``); the analysis, the GUI's poller and the
exporter all turn a failure into a Snapshot here, so a server error shows as "bad response" everywhere and a
refused connection as "unreachable". An exception that carries no failure (a bug inside kvmon, a monitor that
could not be opened) becomes one of the kind its caller chooses, with the exception named in the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType

from kvmon.core.readings import FailureKind, SourceError, SourceFailure
from kvmon.core.snapshot import Activity, Alert, Connection, ConnectionStatus, GpuView, HostView, ModelView, Snapshot
from kvmon.core.verdict import decided

FAILURE_STATUS = MappingProxyType({
    FailureKind.BAD_URL: ConnectionStatus.BAD_URL,
    FailureKind.UNREACHABLE: ConnectionStatus.UNREACHABLE,
    FailureKind.TIMEOUT: ConnectionStatus.TIMEOUT,
    FailureKind.AUTH_REJECTED: ConnectionStatus.AUTH_REJECTED,
    FailureKind.MODEL_LOADING: ConnectionStatus.LOADING,
    FailureKind.ENDPOINT_DISABLED: ConnectionStatus.BAD_RESPONSE,
    FailureKind.UNEXPECTED_BODY: ConnectionStatus.BAD_RESPONSE,
    FailureKind.NOT_FOUND: ConnectionStatus.BAD_RESPONSE,
    FailureKind.SERVER_ERROR: ConnectionStatus.BAD_RESPONSE,
})
# A server that was read reports its own state: loading and sleeping show as such, anything else as connected.
READING_STATE_STATUS = MappingProxyType({"loading": ConnectionStatus.LOADING, "sleeping": ConnectionStatus.SLEEPING})


def connection_status_for(failure: SourceFailure) -> ConnectionStatus:
    """The dashboard's connection state for a typed source failure (an unknown kind: a bad response)."""
    return FAILURE_STATUS.get(failure.kind, ConnectionStatus.BAD_RESPONSE)


def reading_status(state: str) -> ConnectionStatus:
    """The connection state of a server that was read and says it is ``state`` ("ok", "loading", ...)."""
    return READING_STATE_STATUS.get(state, ConnectionStatus.CONNECTED)


def failure_of(exc: BaseException, kind: FailureKind, what: str) -> SourceFailure:
    """The failure an exception stands for: a SourceError's own, else ``kind`` with "``what``: Type: message"."""
    if isinstance(exc, SourceError):
        return exc.failure
    return SourceFailure(kind, f"{what}: {type(exc).__name__}: {exc}")


def failure_snapshot(failure: SourceFailure, *, seq: int, t_monotonic: float, t_wall: float,
                     since_t_monotonic: float | None = None, retry_in_s: float | None = None,
                     last: Snapshot | None = None, gpus: Sequence[GpuView] = (),
                     gpus_unavailable_reason: str | None = None, host: HostView | None = None,
                     alerts: Sequence[Alert] = (), url: str | None = None) -> Snapshot:
    """The Snapshot of a poll that read no server: its status and reason, no speeds, and what is still known.

    ``last``: the last Snapshot that read the server; its backend, version, URL and model stay on screen.
    ``gpus``, ``host`` and ``alerts``: what the GPU and host sources still read, and the alerts they raise.
    ``url``: the server's (without credentials) when no Snapshot read it yet. The verdict says what is wrong.
    """
    status = connection_status_for(failure)
    return decided(Snapshot(
        seq=seq, t_monotonic=t_monotonic, t_wall=t_wall,
        activity=Activity.LOADING if status is ConnectionStatus.LOADING else None,
        connection=Connection(status=status, reason=failure.reason,
                              since_t_monotonic=since_t_monotonic, retry_in_s=retry_in_s),
        backend=last.backend if last else None, server_version=last.server_version if last else None,
        url=last.url if last else url, model=last.model if last else ModelView(),
        gpus=tuple(gpus), gpus_unavailable_reason=gpus_unavailable_reason, host=host or HostView(),
        alerts=tuple(alerts), reasons={"decode_tok_s": f"server not read: {failure.reason}"},
        last_decode=last.last_decode if last else None,
    ))
