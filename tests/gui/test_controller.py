"""The dashboard's analysis settings: the bandwidths from Settings, then the command line's, which win for the same
device; nothing set is the analysis's own defaults; a bad one is refused with what was wrong."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kvmon.core.analysis.settings import BandwidthSpecError
from kvmon.gui.controller import session_settings


def test_the_command_lines_bandwidth_wins_over_the_settings_one_for_the_same_device() -> None:
    s = session_settings(SimpleNamespace(bandwidth_specs=["0=900", "host=60"]), ["0=1000"])
    assert s.gpu_bandwidth_bytes_per_s == {0: 1000e9}
    assert s.host_bandwidth_bytes_per_s == 60e9


def test_nothing_set_keeps_the_defaults() -> None:
    assert session_settings(SimpleNamespace(bandwidth_specs=[]), None) is None


def test_a_bandwidth_that_is_not_a_number_is_refused_by_name() -> None:
    with pytest.raises(BandwidthSpecError, match="'fast' is not a number of GB/s"):
        session_settings(SimpleNamespace(bandwidth_specs=[]), ["gpu=fast"])
