"""One mapping from failure to connection status, one failure Snapshot, one "was the server read?" test."""

from __future__ import annotations

import pytest

from kvmon.core.connection import connection_status_for, failure_of, failure_snapshot, reading_status
from kvmon.core.readings import FailureKind, SourceError, SourceFailure
from kvmon.core.snapshot import SERVER_READ_STATUSES, Connection, ConnectionStatus, ModelView, Snapshot


@pytest.mark.parametrize("kind", list(FailureKind))
def test_every_failure_kind_has_a_status_and_none_is_read(kind: FailureKind) -> None:
    status = connection_status_for(SourceFailure(kind, "why"))
    assert status not in SERVER_READ_STATUSES
    if kind in (FailureKind.SERVER_ERROR, FailureKind.NOT_FOUND, FailureKind.ENDPOINT_DISABLED,
                FailureKind.UNEXPECTED_BODY):
        assert status is ConnectionStatus.BAD_RESPONSE  # a server error is an answer, not "unreachable"


def test_reading_states() -> None:
    assert reading_status("ok") is ConnectionStatus.CONNECTED and reading_status("idle") is ConnectionStatus.CONNECTED
    assert reading_status("sleeping") is ConnectionStatus.SLEEPING
    assert reading_status("loading") is ConnectionStatus.LOADING


def test_an_exception_becomes_its_own_failure_or_the_callers_kind() -> None:
    typed = SourceFailure(FailureKind.SERVER_ERROR, "HTTP 500 from /props")
    assert failure_of(SourceError(typed), FailureKind.UNREACHABLE, "x") is typed
    bug = failure_of(RuntimeError("boom"), FailureKind.UNEXPECTED_BODY, "poll failed")
    assert bug.kind is FailureKind.UNEXPECTED_BODY and bug.reason == "poll failed: RuntimeError: boom"


def test_the_failure_snapshot_keeps_what_is_still_known_and_no_speed() -> None:
    last = Snapshot(seq=3, t_monotonic=1.0, t_wall=1.0, connection=Connection(ConnectionStatus.CONNECTED),
                    backend="llama-server", server_version="b1", url="http://127.0.0.1:8080",
                    model=ModelView(name="m"), decode_tok_s=40.0, context_tokens=900)
    s = failure_snapshot(SourceFailure(FailureKind.UNREACHABLE, "refused"), seq=4, t_monotonic=2.0, t_wall=2.0,
                         since_t_monotonic=2.0, retry_in_s=1.0, last=last)
    assert s.connection == Connection(ConnectionStatus.UNREACHABLE, "refused", 2.0, 1.0)
    assert (s.backend, s.server_version, s.url, s.model.name) == ("llama-server", "b1", "http://127.0.0.1:8080", "m")
    assert s.decode_tok_s is None and s.context_tokens is None and not s.server_read
    assert s.reasons["decode_tok_s"] == "server not read: refused"
    bare = failure_snapshot(SourceFailure(FailureKind.TIMEOUT, "slow"), seq=1, t_monotonic=0.0, t_wall=0.0)
    assert bare.backend is None and bare.model == ModelView() and bare.connection.status is ConnectionStatus.TIMEOUT


@pytest.mark.parametrize("status", list(ConnectionStatus))
def test_server_read_is_connected_sleeping_or_replayed(status: ConnectionStatus) -> None:
    s = Snapshot(seq=1, t_monotonic=0.0, t_wall=0.0, connection=Connection(status))
    assert s.server_read is (status in (ConnectionStatus.CONNECTED, ConnectionStatus.SLEEPING,
                                        ConnectionStatus.REPLAY))
