"""The ``once --json`` document and its schema doc (docs/once-json.md) agree: every Snapshot field is in the document
or named here as internal, and every key the document holds, at every depth, is in the doc. A field added to the
Snapshot or to the document without its line in the doc fails here, named."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from every_field import every_field_snapshot

from kvmon.core.report_json import snapshot_to_json
from kvmon.core.snapshot import Snapshot

DOC = Path(__file__).resolve().parents[2] / "docs" / "once-json.md"

FREE_FORM = ("provenance", "reasons")  # {field: source}, {field: why}: their keys are the fields' names
# Snapshot fields the document does not carry, and why
INTERNAL = {
    "seq": "the poll's number in this session: a single document has no sequence",
    "t_monotonic": "a clock of this process only; the document has t_wall",
    "ceiling_curve": "the plotted ceiling at every depth; the document gives the forecast's milestones",
    "bandwidth_headroom_fraction": "a share the bandwidth panel draws",
    "extra": "what a source passes to the analysis, not a reading",
}


def _document() -> dict[str, Any]:
    return snapshot_to_json(every_field_snapshot())


def _fields_table() -> str:
    text = DOC.read_text(encoding="utf-8")
    table = text[text.index("## Fields"):text.index("## Example")]
    return re.sub(r"``.*?``", "", table)  # a quoted `code` span (``…``) would shift the single ones' pairs


def _first_column_names() -> set[str]:
    """The names the Fields table's rows are about (``model.arch``, ``gpus[]`` as ``gpus``)."""
    names: set[str] = set()
    for line in _fields_table().splitlines():
        if line.startswith("| `"):
            names.update(n.removesuffix("[]") for n in re.findall(r"`([^`]+)`", line.split("|")[1]))
    return names


def _words_in_code() -> set[str]:
    """Every word inside backticks in the Fields section: the nested objects' keys are listed there."""
    return {w for span in re.findall(r"`([^`]+)`", _fields_table()) for w in re.findall(r"\w+", span)}


def _nested_keys(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """(path, key) of every key below the top level of the document."""
    if isinstance(value, dict):
        for k, v in value.items():
            if path:
                yield path, k
            yield from _nested_keys(v, f"{path}.{k}" if path else k)
    elif isinstance(value, list):
        for v in value:
            yield from _nested_keys(v, f"{path}[]")


def test_every_snapshot_field_is_in_the_document_or_internal() -> None:
    doc = _document()
    missing = [f.name for f in dataclasses.fields(Snapshot) if f.name not in doc and f.name not in INTERNAL]
    assert not missing, (f"Snapshot fields neither in the once --json document (kvmon/core/report_json.py) nor in "
                         f"INTERNAL here: {', '.join(missing)}")
    stale = sorted(set(INTERNAL) - {f.name for f in dataclasses.fields(Snapshot)})
    assert not stale, f"INTERNAL names fields the Snapshot no longer has: {stale}"


def test_every_top_level_key_has_a_row_in_the_doc() -> None:
    rows = _first_column_names()
    undocumented = [k for k in _document() if k not in rows and not any(r.startswith(f"{k}.") for r in rows)]
    assert not undocumented, f"keys of the document with no row in docs/once-json.md: {', '.join(undocumented)}"


def test_every_model_key_has_a_row_in_the_doc() -> None:
    rows = _first_column_names()
    undocumented = [f"model.{k}" for k in _document()["model"] if f"model.{k}" not in rows]
    assert not undocumented, f"model keys with no row in docs/once-json.md: {', '.join(undocumented)}"


def test_every_nested_key_is_named_in_the_doc() -> None:
    words = _words_in_code()
    undocumented = sorted({f"{path}.{key}" for path, key in _nested_keys(_document(), "")
                           if key not in words and not path.startswith(FREE_FORM)
                           and (not path.startswith("model") or path.startswith("model.draft"))})
    assert not undocumented, f"keys of the document docs/once-json.md does not name: {', '.join(undocumented)}"
