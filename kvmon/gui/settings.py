"""Remembered settings (QSettings) and the connection dialog; the API key is stored only when the user asks."""

from __future__ import annotations

from PySide6 import QtCore, QtWidgets

WINDOW_RANGES: dict[str, float | None] = {"5 min": 300.0, "1 h": 3600.0, "session": None}


class Settings:
    """Typed access to QSettings; pass ``path`` (an .ini file) to keep tests away from the user's settings."""

    def __init__(self, path: str | None = None) -> None:
        if path is None:
            self.qs = QtCore.QSettings("kvmon", "kvmon")
        else:
            self.qs = QtCore.QSettings(path, QtCore.QSettings.Format.IniFormat)
        self._session_api_key: str | None = None

    def _get(self, key: str, default: object) -> object:
        v = self.qs.value(key, default)
        return default if v is None else v

    @property
    def url(self) -> str:
        return str(self._get("connection/url", ""))

    @url.setter
    def url(self, v: str) -> None:
        self.qs.setValue("connection/url", v)

    @property
    def devices_url(self) -> str:
        """A ``kvmon serve`` on the server's machine whose GPUs and host to read (a server on another machine)."""
        return str(self._get("connection/devices_url", ""))

    @devices_url.setter
    def devices_url(self, v: str) -> None:
        self.qs.setValue("connection/devices_url", v)

    @property
    def remember_key(self) -> bool:
        return str(self._get("connection/remember_key", "false")).lower() == "true"

    @property
    def api_key(self) -> str | None:
        """The key for this session (or the remembered one); never logged."""
        if self._session_api_key:
            return self._session_api_key
        if self.remember_key:
            v = str(self._get("connection/api_key", ""))
            return v or None
        return None

    def set_api_key(self, key: str | None, remember: bool) -> None:
        """Use ``key`` this session; store it on disk only when ``remember`` is ticked."""
        self._session_api_key = key or None
        self.qs.setValue("connection/remember_key", "true" if remember else "false")
        if remember and key:
            self.qs.setValue("connection/api_key", key)
        else:
            self.qs.remove("connection/api_key")

    @property
    def interval_s(self) -> float:
        try:
            return max(0.1, float(self._get("poll/interval_s", 1.0)))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return 1.0

    @interval_s.setter
    def interval_s(self, v: float) -> None:
        self.qs.setValue("poll/interval_s", float(v))

    @property
    def window_range(self) -> str:
        v = str(self._get("view/window_range", "5 min"))
        return v if v in WINDOW_RANGES else "5 min"

    @window_range.setter
    def window_range(self, v: str) -> None:
        self.qs.setValue("view/window_range", v)

    @property
    def geometry(self) -> QtCore.QByteArray | None:
        v = self.qs.value("view/geometry")
        return v if isinstance(v, QtCore.QByteArray) else None

    @geometry.setter
    def geometry(self, v: QtCore.QByteArray) -> None:
        self.qs.setValue("view/geometry", v)

    def sync(self) -> None:
        """Write to disk now."""
        self.qs.sync()


class SettingsDialog(QtWidgets.QDialog):
    """URL, API key (masked; 'remember' unticked by default), poll interval."""

    def __init__(self, settings: Settings, detected_backend: str | None = None,
                 parent: QtWidgets.QWidget | None = None) -> None:
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
        self.remember = QtWidgets.QCheckBox("remember the key on this computer")
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
        buttons = QtWidgets.QDialogButtonBox(QtWidgets.QDialogButtonBox.StandardButton.Ok
                                             | QtWidgets.QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    def apply(self) -> None:
        """Save the dialog's values into the settings."""
        self.settings.url = self.url.text().strip()
        self.settings.set_api_key(self.api_key.text().strip() or None, self.remember.isChecked())
        self.settings.interval_s = self.interval.value()
        self.settings.devices_url = self.devices.text().strip()
        self.settings.sync()
