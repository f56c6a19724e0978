"""A poll whose every request failed is a failure naming the first and the others; one answer is enough."""

from __future__ import annotations

import pytest

from kvmon.core.readings import FailureKind, SourceError, SourceFailure
from kvmon.sources.answers import PollAnswers


def test_every_request_failed_raises_the_first_failure_naming_the_others() -> None:
    a = PollAnswers()
    a.failed(SourceFailure(FailureKind.SERVER_ERROR, "http://gw/health answered HTTP 502", "/health", 502))
    a.failed(SourceFailure(FailureKind.SERVER_ERROR, "http://gw/props answered HTTP 502", "/props", 502))
    a.failed(SourceFailure(FailureKind.UNEXPECTED_BODY, "/slots did not return JSON", "/slots"))
    with pytest.raises(SourceError) as e:
        a.check()
    f = e.value.failure
    assert f.kind is FailureKind.SERVER_ERROR and f.status_code == 502 and f.endpoint == "/health"
    assert f.reason == "http://gw/health answered HTTP 502 (/props, /slots failed too)"


def test_a_server_that_could_not_be_reached_is_one_cause_without_its_endpoints() -> None:
    a = PollAnswers()
    for endpoint in ("/health", "/props", "/slots"):
        a.failed(SourceFailure(FailureKind.UNREACHABLE, "cannot connect (Connection refused)", endpoint))
    with pytest.raises(SourceError) as e:
        a.check()
    assert e.value.failure.reason == "cannot connect (Connection refused)"


def test_one_usable_answer_or_no_request_at_all_is_no_failure() -> None:
    a = PollAnswers()
    a.failed(SourceFailure(FailureKind.TIMEOUT, "/props did not answer in time", "/props"))
    a.ok()
    a.check()
    PollAnswers().check()
