"""A fake Ollama over real HTTP on 127.0.0.1 (constructed fixtures in fixtures/ollama/), and tests of the
source's pure parsing helpers.

``/api/show`` answers by the requested model and ``verbose`` flag, as Ollama does; every request and its
body is recorded so tests can check what the source asked for.
"""

from __future__ import annotations

import json

from ollama_fixture import fixture_bytes

# ------------------------------------------------------------------------------------- pure helpers


def test_parameter_size_parses_ollama_labels() -> None:
    from kvmon.sources.ollama.parse import parse_parameter_size

    assert parse_parameter_size("7.2B") == 7_200_000_000
    assert parse_parameter_size("137M") == 137_000_000
    assert parse_parameter_size("1.5T") == 1_500_000_000_000
    for bad in ("", "large", "B", None, 7, "-3B", "0B"):
        assert parse_parameter_size(bad) is None


def test_times_with_nanoseconds_and_offsets() -> None:
    from kvmon.sources.ollama.parse import parse_time

    a = parse_time("2026-11-30T18:42:10.123456789Z")
    b = parse_time("2024-06-04T14:38:31.83753-07:00")
    assert a is not None and a.microsecond == 123456 and a.utcoffset() is not None
    assert b is not None and b.utcoffset() is not None
    assert parse_time("yesterday") is None and parse_time(None) is None and parse_time("") is None


def test_weight_bytes_from_tensor_list() -> None:
    from kvmon.sources.ollama.parse import weight_bytes_from_tensors

    t = [{"name": "a", "type": "F16", "shape": [4, 8]}, {"name": "b", "type": "Q4_K", "shape": [256, 2]}]
    assert weight_bytes_from_tensors(t) == 4 * 8 * 2 + 2 * 144
    assert weight_bytes_from_tensors([{"name": "a", "type": "NOT_A_TYPE", "shape": [4]}]) is None
    assert weight_bytes_from_tensors([{"name": "a", "type": "F16", "shape": ["x"]}]) is None
    assert weight_bytes_from_tensors([]) is None and weight_bytes_from_tensors("tensors") is None


def test_blob_path_from_modelfile() -> None:
    from kvmon.sources.ollama.parse import blob_path_from_modelfile

    body = json.loads(fixture_bytes("show.llama3.1-8b.json"))
    path = blob_path_from_modelfile(body["modelfile"])
    assert path is not None and path.endswith(
        "sha256-667b0c1932bc6ffc593ed1d03f895bf2dc8dc6df21db3042284a6f4416b06a29"
    )
    assert blob_path_from_modelfile("FROM llama3.1:8b\n") is None
    assert blob_path_from_modelfile(None) is None
