"""The Host a server listening on loopback answers: this machine's loopback names and addresses, any port."""

from __future__ import annotations

import pytest

from kvmon.core.locality import host_header_allowed


@pytest.mark.parametrize("host", [None, "localhost", "localhost:9464", "LOCALHOST.", "127.0.0.1", "127.0.0.1:11435",
                                  "127.5.6.7:80", "[::1]", "[::1]:9464", "::1", "ip6-localhost"])
def test_loopback_names_and_addresses_are_answered(host: str | None) -> None:
    assert host_header_allowed(host)


@pytest.mark.parametrize("host", ["evil.example", "evil.example:9464", "127.0.0.1.nip.io", "127.evil.example",
                                  "localhost.evil.example", "192.168.1.5:9464", "[2001:db8::1]:80", "0.0.0.0", ""])
def test_other_names_are_refused(host: str) -> None:
    assert not host_header_allowed(host)


def test_this_machines_own_name_and_localhost_subdomains_are_answered() -> None:
    import socket

    assert host_header_allowed(f"{socket.gethostname()}:9464") and host_header_allowed("kvmon.localhost:9464")
