"""A recording keeps every field of the Snapshot: each one, at every depth, comes back from a recording line with the
value it had (the live-only ones, marked ``TRANSIENT``, are left out of the line and come back empty). A field added
with a type the round trip does not rebuild fails here, named by its path."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

from every_field import every_field_snapshot

from kvmon.core.recorder import snapshot_from_dict, snapshot_to_dict


def _leaves(value: Any, path: str) -> Iterator[tuple[str, Any, bool]]:
    """(path, value, transient) of every field below ``value``, dataclasses walked field by field."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            sub = getattr(value, f.name)
            if f.metadata.get("transient"):
                yield f"{path}.{f.name}", sub, True
            else:
                yield from _leaves(sub, f"{path}.{f.name}")
    elif isinstance(value, tuple) and any(dataclasses.is_dataclass(v) for v in value):
        for i, v in enumerate(value):
            yield from _leaves(v, f"{path}[{i}]")
    else:
        yield path, value, False


def test_every_field_comes_back_from_a_recording_line() -> None:
    live = every_field_snapshot()
    line = json.dumps(snapshot_to_dict(live), allow_nan=False)  # what the recorder writes
    back = snapshot_from_dict(json.loads(line))
    was = {p: (v, transient) for p, v, transient in _leaves(live, "snapshot")}
    now = {p: v for p, v, _t in _leaves(back, "snapshot")}
    lost = [p for p, (v, transient) in was.items() if not transient and (now.get(p) != v or type(now.get(p))
                                                                          is not type(v))]
    assert not lost, f"fields a recording does not bring back: {', '.join(lost)}"
    kept_live = [p for p, (_v, transient) in was.items() if transient and now.get(p) is not None]
    assert not kept_live, f"live-only fields written to the recording: {', '.join(kept_live)}"
    assert len(was) > 200  # every structure was filled and walked
