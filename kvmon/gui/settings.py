"""Remembered settings (QSettings) and the settings dialog (connection, poll interval, memory bandwidths); the API
key is remembered only when the user asks, in the system keychain (``kvmon.app.keystore``), and in the settings file
only when there is no keychain and the user agreed, the file then readable by the user alone (mode 0600)."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Container
from typing import Any, Generic, TypeVar

from PySide6 import QtCore, QtWidgets

from kvmon.app.keystore import KeychainUnavailable, delete_secret, load_secret, save_secret
from kvmon.gui import theme

KEY_IN_KEYCHAIN, KEY_IN_FILE, KEY_THIS_SESSION = "keychain", "settings file", "session"

WINDOW_RANGES: dict[str, float | None] = {"5 min": 300.0, "1 h": 3600.0, "session": None}
SCHEMES = ("system", "light", "dark")
# the panels View ▸ Panels switches (name -> the words in the menu)
PANELS: dict[str, str] = {"speed_time": "Speed over time", "memory": "Memory", "bandwidth": "Bandwidth",
                          "latency": "Replies", "energy": "Energy", "alerts": "Alerts and advice", "toolbar": "Toolbar"}


T = TypeVar("T")


def _text(v: object) -> str:
    return "" if v is None else str(v)


def _choice(choices: Container[str], default: str) -> Callable[[object], str]:
    """Read a setting that is one of ``choices``; anything else reads as ``default``."""
    return lambda v: str(v) if v is not None and str(v) in choices else default


def _flag(v: object) -> bool:
    return str(v).lower() == "true"


def _bytes(v: object) -> QtCore.QByteArray | None:
    return v if isinstance(v, QtCore.QByteArray) else None


def _seconds(v: object) -> float:
    """The poll interval: at least 0.1 s; 1 s when unset or unreadable."""
    try:
        return max(0.1, float(1.0 if v is None else v))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 1.0


def _specs(v: object) -> list[str]:
    """The bandwidths as ``DEVICE=GB/s``; unreadable ones are dropped."""
    from kvmon.core.analysis.settings import BandwidthSpecError, parse_bandwidth, split_specs

    out = []
    for spec in split_specs(_text(v)):
        try:
            parse_bandwidth(spec)
        except BandwidthSpecError:
            continue
        out.append(spec)
    return out


class _Setting(Generic[T]):
    """One remembered value under ``key``: ``read`` makes what QSettings holds (None when nothing) a ``T``, ``write``
    what is stored."""

    def __init__(self, key: str, read: Callable[[object], T], write: Callable[[T], object] = lambda v: v) -> None:
        self.key, self.read, self.write = key, read, write

    def __get__(self, obj: Settings, owner: type) -> T:
        return self.read(obj.qs.value(self.key))

    def __set__(self, obj: Settings, v: T) -> None:
        obj.qs.setValue(self.key, self.write(v))


class Settings:
    """Typed access to QSettings; pass ``path`` (an .ini file) to keep tests away from the user's settings."""

    url = _Setting("connection/url", _text)
    # a ``kvmon serve`` on the server's machine whose GPUs and host to read (a server on another machine)
    devices_url = _Setting("connection/devices_url", _text)
    remember_key = _Setting("connection/remember_key", _flag)  # written by set_api_key alone
    interval_s = _Setting("poll/interval_s", _seconds, float)
    # the bandwidths the user set, as ``DEVICE=GB/s`` (host=60, 0=936, CUDA0=936)
    bandwidth_specs = _Setting("bandwidth/specs", _specs, ", ".join)
    window_range = _Setting("view/window_range", _choice(WINDOW_RANGES, "5 min"))
    # View ▸ Theme: "system" (follow the desktop), "light" or "dark"
    scheme = _Setting("view/scheme", _choice(SCHEMES, "system"), lambda v: v if v in SCHEMES else "system")
    # View ▸ Panels: the panels switched off (names from ``PANELS``)
    hidden_panels = _Setting("view/hidden_panels", lambda v: frozenset(p for p in _text(v).split(",") if p in PANELS),
                             lambda v: ",".join(sorted(p for p in v if p in PANELS)))
    geometry = _Setting("view/geometry", _bytes)
    compact_geometry = _Setting("compact/geometry", _bytes)  # where the compact view was and how big
    # the compact view stays above other windows (beside a chat that would cover it)
    compact_on_top = _Setting("compact/on_top", _flag, lambda v: "true" if v else "false")

    def __init__(self, path: str | None = None) -> None:
        if path is None:
            self.qs = QtCore.QSettings("kvmon", "kvmon")
        else:
            self.qs = QtCore.QSettings(path, QtCore.QSettings.Format.IniFormat)
        self._session_api_key: str | None = None
        self.notices: list[str] = []  # what the user should be told once (a key file others could read, fixed)
        self._guard_key_file()

    def _get(self, key: str, default: object) -> object:
        v = self.qs.value(key, default)
        return default if v is None else v

    @property
    def api_key(self) -> str | None:
        """The key for this session, else the remembered one (keychain, or the file where the user agreed to it);
        never logged. A key an older kvmon left in the file moves into the keychain when there is one."""
        if self._session_api_key:
            return self._session_api_key
        if not self.remember_key:
            return None
        in_file = str(self._get("connection/api_key", "")) or None
        if in_file:
            self._guard_key_file()
        if self._get("connection/key_store", "") == KEY_IN_FILE:
            return in_file
        try:
            kept = load_secret()
            if kept is None and in_file:
                save_secret(in_file)
        except KeychainUnavailable:
            return in_file  # an older kvmon's file, and no keychain to move it to: it stays where it was
        if in_file:
            self.qs.remove("connection/api_key")
            self.qs.setValue("connection/key_store", KEY_IN_KEYCHAIN)
        return kept or in_file

    def set_api_key(self, key: str | None, remember: bool, *, allow_plain_text: bool = False) -> str:
        """Use ``key`` this session; remember it only when ``remember`` is ticked. Returns where it is kept
        (``KEY_IN_KEYCHAIN``, ``KEY_IN_FILE``, ``KEY_THIS_SESSION``).

        Without a keychain, raises KeychainUnavailable (the key is then used this session only) unless the user
        agreed to the settings file (``allow_plain_text``).
        """
        self._session_api_key = key or None
        if not (remember and key):
            self._forget_remembered()
            return KEY_THIS_SESSION
        try:
            save_secret(key)
        except KeychainUnavailable:
            if not allow_plain_text:
                self._forget_remembered()
                raise
            self._owner_only()  # before the key is written: the file is never readable by others with it
            self.qs.setValue("connection/remember_key", "true")
            self.qs.setValue("connection/key_store", KEY_IN_FILE)
            self.qs.setValue("connection/api_key", key)
            self.sync()
            return KEY_IN_FILE
        self.qs.setValue("connection/remember_key", "true")
        self.qs.setValue("connection/key_store", KEY_IN_KEYCHAIN)
        self.qs.remove("connection/api_key")
        return KEY_IN_KEYCHAIN

    def _forget_remembered(self) -> None:
        self.qs.setValue("connection/remember_key", "false")
        self.qs.remove("connection/key_store")
        self.qs.remove("connection/api_key")
        try:
            delete_secret()
        except KeychainUnavailable:
            pass  # nothing can be kept where there is no keychain

    def _owner_only(self) -> int | None:
        """Make the settings file (a file, not the Windows registry) readable and writable by its owner only; the
        mode it had when that changed it, else None. Qt keeps a file's mode when it writes the file again, so a
        mode once wider stays wider until this runs."""
        path = self.qs.fileName()
        if not path or not os.path.isabs(path):
            return None
        try:
            if not os.path.exists(path):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
            mode = stat.S_IMODE(os.stat(path).st_mode)
            if mode != 0o600:
                os.chmod(path, 0o600)
                return mode
        except OSError:
            pass  # a file system without modes (FAT, a network share): nothing more can be done here
        return None

    def _guard_key_file(self) -> None:
        """A settings file holding a key (an older kvmon's, or the agreed fallback) that others may read is made
        the user's alone when it is read or written, and the user is told (``notices``)."""
        if os.name != "posix" or not self.qs.contains("connection/api_key"):
            return
        mode = self._owner_only()
        if mode is not None and mode & 0o077:
            self.notices.append(f"the settings file {self.qs.fileName()} holds an API key and was readable by "
                                f"others (mode {mode:04o}): it is now readable by you alone (0600)")

    def sync(self) -> None:
        """Write to disk now (a file holding a key stays readable by its owner only)."""
        self._guard_key_file()  # before Qt writes it: the key never lands in a file others can read
        self.qs.sync()
        self._guard_key_file()


class SettingsDialog(QtWidgets.QDialog):
    """URL, API key (masked; 'remember' unticked by default), poll interval, and the memory bandwidths the hardware
    cannot report: the host RAM's (else measured once) and any device's by number or by the server's name."""

    def __init__(self, settings: Settings, detected_backend: str | None = None,
                 parent: QtWidgets.QWidget | None = None, snapshot: Any = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("kvmon settings")
        self.settings = settings
        form = QtWidgets.QFormLayout(self)
        self.url = QtWidgets.QLineEdit(settings.url)
        self.url.setPlaceholderText("auto: every server on this machine (llama-server :9931 or any port, Ollama, ...)")
        self.backend = QtWidgets.QLabel(f"auto-detected ({detected_backend or 'not connected'})")
        self.api_key = QtWidgets.QLineEdit(settings.api_key or "")
        self.api_key.setEchoMode(QtWidgets.QLineEdit.EchoMode.Password)
        self.api_key.setPlaceholderText("only if the server was started with --api-key")
        self.remember = QtWidgets.QCheckBox("remember the key (in the system keychain)")
        self.remember.setToolTip("Kept in the system keychain; where there is none, kvmon asks before it keeps the "
                                 "key in its settings file, readable by you alone")
        self.remember.setChecked(settings.remember_key)
        self.interval = QtWidgets.QDoubleSpinBox()
        self.interval.setRange(0.2, 60.0)
        self.interval.setSingleStep(0.5)
        self.interval.setSuffix(" s")
        self.interval.setValue(settings.interval_s)
        self.devices = QtWidgets.QLineEdit(settings.devices_url)
        self.devices.setPlaceholderText("a server on another machine: http://HOST:9464 (kvmon serve there)")
        self.devices.setToolTip("The GPUs and RAM of the server's machine, read from a `kvmon serve` running there "
                                "(its /metrics). Takes effect at the next start.")
        form.addRow("Server URL", self.url)
        form.addRow("Backend", self.backend)
        form.addRow("API key", self.api_key)
        form.addRow("", self.remember)
        form.addRow("Poll every", self.interval)
        form.addRow("Device readings from", self.devices)
        self._add_bandwidths(form, snapshot)
        self.forget_curves = QtWidgets.QPushButton("Forget measured curves…")
        self.forget_curves.setToolTip("Empty the atlas of measured curves: every speed-vs-context point kvmon kept "
                                      "from sessions and sweeps, for every configuration")
        self.forget_curves.clicked.connect(lambda: forget_measured_curves(self))
        form.addRow("Measured curves", self.forget_curves)
        buttons = QtWidgets.QDialogButtonBox(QtWidgets.QDialogButtonBox.StandardButton.Ok
                                             | QtWidgets.QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    def _add_bandwidths(self, form: QtWidgets.QFormLayout, snapshot: Any) -> None:
        from kvmon.core.analysis.settings import parse_bandwidth

        specs = self.settings.bandwidth_specs
        host = next((parse_bandwidth(x)[1] for x in specs if parse_bandwidth(x)[0] == "host"), None)
        others = [x for x in specs if parse_bandwidth(x)[0] != "host"]
        self.host_bw = QtWidgets.QLineEdit("" if host is None else f"{host / 1e9:g}")
        self.host_bw.setPlaceholderText(_host_placeholder(snapshot))
        self.host_bw.setToolTip("Host RAM bandwidth in GB/s. Empty: kvmon measures it once (a streaming copy, "
                                "while no slot decodes), else uses the memory the system reports")
        self.device_bw = QtWidgets.QLineEdit(", ".join(others))
        self.device_bw.setPlaceholderText(_device_placeholder(snapshot))
        self.device_bw.setToolTip("Devices' peak bandwidth in GB/s, for a GPU kvmon's tables lack or to override them:"
                                  "\nDEVICE=GB/s, comma-separated; DEVICE is kvmon's number (0, 1) or the server's "
                                  "name for it (CUDA0, ROCm0, Vulkan0, MTL0, RPC[host:port])")
        self.bw_error = QtWidgets.QLabel("")
        self.bw_error.setStyleSheet(f"color: {theme.hex_color('critical')};")
        self.bw_error.hide()
        form.addRow("Host RAM (GB/s)", self.host_bw)
        form.addRow("Devices (GB/s)", self.device_bw)
        form.addRow("", self.bw_error)

    def bandwidth_specs(self) -> list[str]:
        """The bandwidths as typed, checked; raises BandwidthSpecError (shown in the dialog) for one it cannot read."""
        from kvmon.core.analysis.settings import parse_bandwidth, split_specs

        specs = []
        host = self.host_bw.text().strip().removesuffix("GB/s").strip()
        if host:
            specs.append(f"host={host}")
        specs += split_specs(self.device_bw.text())
        for spec in specs:
            parse_bandwidth(spec)
        return specs

    def accept(self) -> None:
        """Close only when every bandwidth reads as DEVICE=GB/s; otherwise say which one does not."""
        from kvmon.core.analysis.settings import BandwidthSpecError

        try:
            self.bandwidth_specs()
        except BandwidthSpecError as exc:
            self.bw_error.setText(str(exc))
            self.bw_error.show()
            return
        super().accept()

    def apply(self) -> None:
        """Save the dialog's values into the settings; without a keychain, ask before a key goes to the file."""
        self.settings.url = self.url.text().strip()
        key, remember = self.api_key.text().strip() or None, self.remember.isChecked()
        try:
            self.settings.set_api_key(key, remember)
        except KeychainUnavailable as e:
            if self.ask_plain_text(str(e)):
                self.settings.set_api_key(key, remember, allow_plain_text=True)
        self.settings.interval_s = self.interval.value()
        self.settings.devices_url = self.devices.text().strip()
        self.settings.bandwidth_specs = self.bandwidth_specs()
        self.settings.sync()

    def ask_plain_text(self, why: str) -> bool:
        """Whether the user agrees to keep the key in the settings file, as there is no keychain."""
        answer = QtWidgets.QMessageBox.question(
            self, "No keychain for the API key",
            f"kvmon keeps remembered keys in the system keychain, and there is none here ({why}).\n\n"
            "Keep the key in kvmon's settings file instead? Only you can read that file, but the key is stored "
            "there as plain text. Choose No to use the key for this session only.",
            QtWidgets.QMessageBox.StandardButton.Yes | QtWidgets.QMessageBox.StandardButton.No,
            QtWidgets.QMessageBox.StandardButton.No)
        return answer == QtWidgets.QMessageBox.StandardButton.Yes


def _host_placeholder(snapshot: Any) -> str:
    """What the host bandwidth is now, for the empty field: "measured 62 GB/s on 2026-05-02", or how it will be."""
    import time as _time

    h = getattr(snapshot, "host", None)
    if h is None or not h.host_bandwidth_bytes_per_s:
        return "empty: measured once by kvmon"
    when = ""
    if h.host_bandwidth_source == "measured" and h.host_bandwidth_measured_at_unix_s:
        when = f" on {_time.strftime('%Y-%m-%d', _time.localtime(h.host_bandwidth_measured_at_unix_s))}"
    return f"{h.host_bandwidth_source or 'now'}: {h.host_bandwidth_bytes_per_s / 1e9:.0f} GB/s{when}"


def _device_placeholder(snapshot: Any) -> str:
    gpus = getattr(snapshot, "gpus", ()) or ()
    known = [f"{g.log_name or g.index}={g.peak_bandwidth_bytes_per_s / 1e9:.0f} ({g.bandwidth_source})"
             for g in gpus if g.peak_bandwidth_bytes_per_s]
    return ", ".join(known) if known else "e.g. CUDA0=936, 1=1008"


def forget_measured_curves(parent: QtWidgets.QWidget, *, ask: bool = True) -> bool:
    """Settings ▸ Forget measured curves: empty the atlas of measured curves once the user agrees; whether it did."""
    from kvmon.app.atlas import AtlasError, default_atlas

    yes = QtWidgets.QMessageBox.StandardButton.Yes
    if ask and QtWidgets.QMessageBox.question(
            parent, "Forget measured curves", "Forget every speed-vs-context curve kvmon measured, for every "
            "configuration? The dashboard then shows only what it measures from now on.") != yes:
        return False
    try:
        default_atlas().forget()
    except AtlasError as exc:
        QtWidgets.QMessageBox.warning(parent, "Forget measured curves", f"The curves could not be forgotten: {exc}")
        return False
    return True
