"""NVML's errors in words a user reads, and names NVML gives as bytes read as text."""

from __future__ import annotations

from kvmon.sources.nvml_calls import GPU_IS_LOST, NO_PERMISSION, NOT_SUPPORTED, describe, nvml_code, text_of


class NVMLError(Exception):
    """What pynvml raises: the error code in ``value``."""

    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


def test_known_codes_are_said_in_words() -> None:
    assert describe(NVMLError(NOT_SUPPORTED)) == "not supported on this GPU/driver"
    assert describe(NVMLError(NO_PERMISSION)) == "no permission to query this"
    assert describe(NVMLError(GPU_IS_LOST)).startswith("GPU is lost")


def test_an_unknown_code_keeps_its_number_and_another_error_its_kind() -> None:
    assert describe(NVMLError(77)).startswith("NVML error 77")
    assert describe(ValueError("bad")) == "unexpected ValueError: bad"
    assert nvml_code(ValueError("bad")) is None and nvml_code(NVMLError(3)) == 3


def test_a_name_in_bytes_is_text_even_when_it_is_not_utf8() -> None:
    assert text_of(b"NVIDIA GeForce RTX 4090") == "NVIDIA GeForce RTX 4090"
    assert text_of(b"RTX \xff") == "RTX \ufffd"
    assert text_of(3) == "3"
