"""NVML calls read through one guarded path: NVML's error codes in words, a lost GPU, what is kept per device
between polls, and ``GpuRead``, which collects one GPU's fields and the reason of each one it could not read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# NVML error codes (stable across NVML versions; the names match pynvml's NVML_ERROR_* constants).
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
NO_PERMISSION = 4
INSUFFICIENT_POWER = 8
NOT_FOUND = 6
DRIVER_NOT_LOADED = 9
TIMEOUT = 10
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
RESET_REQUIRED = 16
LIB_RM_VERSION_MISMATCH = 18
ARGUMENT_VERSION_MISMATCH = 25
UNKNOWN = 999

# Answers that will not change while the driver stays loaded: stop asking after the first one.
PERMANENT = frozenset({NOT_SUPPORTED, FUNCTION_NOT_FOUND})
# The v2 memory query answers these where only v1 exists (old driver); v1 is then used for good.
V2_ABSENT = frozenset({INVALID_ARGUMENT, NOT_SUPPORTED, FUNCTION_NOT_FOUND, ARGUMENT_VERSION_MISMATCH})

_PHRASES: dict[int, str] = {
    NOT_SUPPORTED: "not supported on this GPU/driver",
    NO_PERMISSION: "no permission to query this",
    INSUFFICIENT_POWER: "GPU lacks external power",
    TIMEOUT: "NVML timed out",
    FUNCTION_NOT_FOUND: "the installed driver lacks this query (too old)",
    GPU_IS_LOST: "GPU is lost (fell off the bus; needs a reset)",
    RESET_REQUIRED: "GPU needs a reset",
    UNKNOWN: "NVML unknown error",
}


class Lost(Exception):
    """Raised inside one GPU's read when NVML says the GPU is lost: stop asking it anything."""


def nvml_code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def describe(exc: BaseException) -> str:
    code = nvml_code(exc)
    if code is not None:
        return _PHRASES.get(code, f"NVML error {code}: {exc}")
    return f"unexpected {type(exc).__name__}: {exc}"


def text_of(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


@dataclass
class GpmState:
    supported: bool | None = None
    reason: str | None = None
    samples: list[Any] = field(default_factory=list)
    have_previous: bool = False


@dataclass
class DeviceState:
    handle: Any = None
    name: str | None = None
    uuid: str | None = None
    pci: tuple[str | None, str | None] | None = None  # (bus id, vendor:device), read once
    skip: dict[str, str] = field(default_factory=dict)  # fname -> permanent reason
    memory_v2: bool = True
    pcie_counters: bool | None = None  # cumulative PCIe byte counters (field values) supported?
    pcie_last: tuple[int, int, int] | None = None  # (tx bytes, rx bytes, timestamp µs) at the last poll
    throttle_reasons_call: bool = False  # the driver predates 535: its clocks event reasons have their old name
    util_seen_us: int = 0  # the newest process utilisation sample read (NVML answers those after it)
    gpm: GpmState = field(default_factory=GpmState)


class GpuRead:
    """Collects one GPU's fields and reasons while calling NVML through one guarded path."""

    def __init__(self, nvml: Any, state: DeviceState) -> None:
        self.nvml = nvml
        self.state = state
        self.values: dict[str, Any] = {}
        self.reasons: dict[str, str] = {}
        self.last_code: int | None = None  # the NVML error code of the last call that failed

    def call(self, fields: tuple[str, ...], fname: str, *args: Any, skip_key: str | None = None, **kwargs: Any) -> Any:
        """Call ``nvml.fname``; on failure set each field's reason and return None (GPU lost: raise). ``skip_key``:
        what a permanent failure is remembered under (one function asked for several things: the clock kinds)."""
        key = skip_key or fname
        skipped = self.state.skip.get(key)
        if skipped is not None:
            self.fail(fields, skipped)
            return None
        try:
            return getattr(self.nvml, fname)(*args, **kwargs)
        except Exception as exc:  # every NVML failure, and anything odd from a binding or fake
            code = self.last_code = nvml_code(exc)
            if code == GPU_IS_LOST:
                raise Lost(describe(exc)) from exc
            reason = f"{describe(exc)} ({fname})"
            if code in PERMANENT:
                self.state.skip[key] = reason
            self.fail(fields, reason)
            return None

    def fail(self, fields: tuple[str, ...], reason: str) -> None:
        for f in fields:
            self.reasons.setdefault(f, reason)
