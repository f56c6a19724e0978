"""The API key a user asked kvmon to remember, kept in the platform's keychain through ``keyring`` (the macOS
Keychain, the Windows Credential Locker, the Secret Service of a Linux desktop).

Where there is no keychain (a headless machine, a desktop without a Secret Service), every call raises
``KeychainUnavailable`` saying why; keeping the key anywhere else is the caller's decision, made only with the
user's consent (``kvmon.gui.settings`` then writes it to a settings file readable by the user alone). ``keyring``
is imported on first use, so the commands that never remember a key (``once``, ``serve``) never load it.
"""

from __future__ import annotations

from typing import Any

SERVICE = "kvmon"
API_KEY_ACCOUNT = "api-key"


class KeychainUnavailable(Exception):
    """There is no usable keychain here (or it refused the call); the message says which."""


def _call(what: str, fn_name: str, *args: str) -> Any:
    try:
        import keyring
        import keyring.errors
    except ImportError as e:  # pragma: no cover - a dependency of kvmon
        raise KeychainUnavailable(f"the keyring package is missing ({e})") from None
    try:
        return getattr(keyring, fn_name)(*args)
    except keyring.errors.PasswordDeleteError:
        return None  # nothing stored: already forgotten
    except Exception as e:  # a backend's own errors (D-Bus, a locked keychain) are all "not available" here
        text = str(e).strip()
        detail = text.splitlines()[0].split(". ", 1)[0].rstrip(".") if text else type(e).__name__
        raise KeychainUnavailable(f"cannot {what} the system keychain: {detail}") from None


def save_secret(secret: str, account: str = API_KEY_ACCOUNT) -> None:
    """Keep ``secret`` in the keychain; raises KeychainUnavailable."""
    _call("write to", "set_password", SERVICE, account, secret)


def load_secret(account: str = API_KEY_ACCOUNT) -> str | None:
    """The secret kept in the keychain (None when there is none); raises KeychainUnavailable."""
    value = _call("read", "get_password", SERVICE, account)
    return value if isinstance(value, str) and value else None


def delete_secret(account: str = API_KEY_ACCOUNT) -> None:
    """Forget the secret (nothing kept is fine); raises KeychainUnavailable."""
    _call("delete from", "delete_password", SERVICE, account)
