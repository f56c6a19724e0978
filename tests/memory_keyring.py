"""A keyring backend that keeps passwords in a dict: a test double for the platform keychain (the CI machine has
no Secret Service). It implements the real ``keyring.backend.KeyringBackend`` interface, so kvmon talks to it
through the ``keyring`` package exactly as it talks to the system keychain.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import keyring
import keyring.backend
import keyring.errors
from keyring.backends import fail


class MemoryKeyring(keyring.backend.KeyringBackend):
    """Passwords in memory, keyed by (service, username); nothing touches the disk."""

    priority = 1  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.passwords: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.passwords.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.passwords[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        if self.passwords.pop((service, username), None) is None:
            raise keyring.errors.PasswordDeleteError("no such password")


@contextmanager
def using_keyring(backend: keyring.backend.KeyringBackend) -> Iterator[keyring.backend.KeyringBackend]:
    """Make ``backend`` the keyring for the block, then put the previous one back."""
    previous = keyring.get_keyring()
    keyring.set_keyring(backend)
    try:
        yield backend
    finally:
        keyring.set_keyring(previous)


def no_keychain() -> keyring.backend.KeyringBackend:
    """keyring's own "no backend available" keyring: every call raises NoKeyringError, as on a headless box."""
    return fail.Keyring()
