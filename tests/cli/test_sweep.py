"""``kvmon sweep``'s command line: a bad count is a usage error naming it, and a server that is not there is said in
one line with exit status 2 before anything is measured."""

from __future__ import annotations

import socket

import pytest
from kvmon_in_process import _run_kvmon

from kvmon.cli import main as kvmon_main


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(("option", "value", "says"), [
    ("--steps", "0", "'0': give a number above 0"),
    ("--to", "deep", "'deep' is not a whole number"),
    ("--generate", "-5", "'-5': give a number above 0"),
])
def test_a_bad_count_is_a_usage_error_that_names_it(option: str, value: str, says: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        kvmon_main(["sweep", "http://127.0.0.1:8080", option, value])
    assert exit_.value.code == 2
    assert says in capsys.readouterr().err


def test_a_server_that_is_not_there_is_one_line_and_status_2() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    rc, out, err = _run_kvmon("sweep", url, "--timeout", "2", "--no-atlas")
    assert rc == 2
    assert out == ""
    assert err == f"kvmon: cannot connect to {url} (Connection refused)\n"
