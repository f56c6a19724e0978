"""kvmon proxy's command line: loopback by default, --listen parsed, bad arguments refused, the command serving."""

from __future__ import annotations

import http.client
import json
import os
import socket

import pytest
from raw_upstream import Upstream
from repo_paths import ROOT

from kvmon.cli.proxy import parse_listen
from kvmon.proxy.server import ProxyServer


def test_binds_loopback_by_default_and_parses_listen() -> None:
    assert ProxyServer().host == "127.0.0.1"
    assert parse_listen("127.0.0.1:11435") == ("127.0.0.1", 11435)
    assert parse_listen(":9000") == ("127.0.0.1", 9000)
    assert parse_listen("11436") == ("127.0.0.1", 11436)
    assert parse_listen("[::1]:11435") == ("::1", 11435)
    for bad in ("localhost", "host:port", "1.2.3.4:99999"):
        with pytest.raises(ValueError):
            parse_listen(bad)


def test_run_rejects_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from kvmon.cli.proxy import run

    assert run(argparse.Namespace(listen="nonsense", upstream="http://127.0.0.1:11434")) == 2
    assert run(argparse.Namespace(listen="127.0.0.1:0", upstream="ftp://x")) == 2
    assert run(argparse.Namespace(listen="127.0.0.1:0", upstream="http://user:pw@127.0.0.1:1")) == 2
    err = capsys.readouterr().err
    assert "kvmon proxy:" in err and "pw" not in err


def test_kvmon_proxy_command_serves(upstream: Upstream) -> None:
    import subprocess
    import sys

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    root = ROOT
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvmon", "proxy", "--listen", f"127.0.0.1:{port}", "--upstream", upstream.url],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(root)),
    )
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        assert f"http://127.0.0.1:{port}" in banner and upstream.url in banner
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/kvmon/stats")
        doc = json.loads(conn.getresponse().read())
        conn.close()
        assert doc["kvmon_proxy"] == 1 and doc["listen"] == f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)
