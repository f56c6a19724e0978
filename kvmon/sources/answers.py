"""Health from answers, not from a TCP connection: what one poll's requests came back with.

A gateway in front of a model server that died (nginx after llama-server crashed) still accepts every connection
and answers every path: 502, an HTML page, an empty body, a redirect. Such a server is down, whatever the socket
says. A source notes each usable answer (a body of the shape it reads) and each failure; when a poll's requests
all failed, ``check`` raises the first failure, naming the other endpoints that answered wrongly too, so the poll is
a failure (``kvmon_up`` 0, ``once`` exits 2). One endpoint failing among answering ones costs only its own values.
A server that could not be reached at all is one cause: its endpoints are not listed.
"""

from __future__ import annotations

from kvmon.core.readings import FailureKind, SourceError, SourceFailure


class PollAnswers:
    """The usable answers and the failures of one poll's requests."""

    def __init__(self) -> None:
        self.usable = 0
        self.failures: list[SourceFailure] = []

    def ok(self) -> None:
        """A request gave an answer of the shape the source reads."""
        self.usable += 1

    def failed(self, failure: SourceFailure) -> None:
        """A request failed (no answer, an error status, a body that is not what the endpoint gives)."""
        self.failures.append(failure)

    def check(self) -> None:
        """Raise SourceError when requests were made and every one of them failed."""
        if self.usable or not self.failures:
            return
        first = self.failures[0]
        unanswered = first.kind in (FailureKind.UNREACHABLE, FailureKind.TIMEOUT, FailureKind.BAD_URL)
        others = [] if unanswered else list(dict.fromkeys(f.endpoint for f in self.failures[1:]
                                                          if f.endpoint and f.endpoint != first.endpoint))
        too = f" ({', '.join(others)} failed too)" if others else ""
        raise SourceError(SourceFailure(first.kind, first.reason + too, first.endpoint, first.status_code))
