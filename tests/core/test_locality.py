"""The Host a server listening on loopback answers: this machine's loopback names and addresses, any port."""

from __future__ import annotations

import pytest

from kvmon.core.locality import ListenAddressError, host_header_allowed, is_loopback_host, parse_listen, server_here


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


def test_a_blank_host_is_refused_unless_the_command_names_one() -> None:
    with pytest.raises(ListenAddressError, match="no host"):
        parse_listen(":9464", "127.0.0.1:9464")
    assert parse_listen(":9000", "127.0.0.1:11435", blank_host="127.0.0.1") == ("127.0.0.1", 9000)
    assert parse_listen(None, "127.0.0.1:11435") == ("127.0.0.1", 11435)


@pytest.mark.parametrize("text", ["[::1]9464", "::1:9464", "a b:9464", "[nothost]:1", "h:99999", "h:port", ""])
def test_both_commands_refuse_the_same_bad_addresses(text: str) -> None:
    for blank in (None, "127.0.0.1"):
        with pytest.raises(ListenAddressError):
            parse_listen(text, "127.0.0.1:1", blank_host=blank)


def test_loopback() -> None:
    assert all(is_loopback_host(h) for h in ("127.0.0.1", "127.0.1.1", "localhost", "::1", "[::1]"))
    assert not any(is_loopback_host(h) for h in ("0.0.0.0", "::", "192.168.1.5", "gpu-box", "", None))


@pytest.mark.parametrize(("url", "here"), [
    ("http://127.0.0.1:9931", True), ("http://127.0.0.2:9931", True), ("http://localhost:11434", True),
    ("http://[::1]:8000", True), ("http://LOCALHOST:1234", True), ("http://192.168.1.5:9931", False),
    ("http://gpu-box:9931", False), ("http://0.0.0.0:9931", False),
])
def test_every_place_that_asks_is_it_here_gets_one_answer(url: str, here: bool) -> None:
    """The server list's label, the analysis and the bandwidth probe ("on this machine") read the one rule."""
    from kvmon.app.servers import short_label

    assert server_here(url, ()) is here
    assert server_here(url, (4242,))  # its processes were found here, whatever address it listens on
    port = url.rsplit(":", 1)[1]
    assert (short_label(url, "llama-server") == f"llama-server :{port}") is here
    assert is_loopback_host(url.split("://", 1)[1].rsplit(":", 1)[0]) is here


def test_a_url_that_cannot_be_split_is_not_known_to_be_here() -> None:
    assert not server_here("http://[::1:9931", ())
