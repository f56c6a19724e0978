"""Every Prometheus family ``kvmon serve`` exposes is in its doc (docs/exporter.md): a family added for a new Snapshot
field (a ``prometheus=`` name in ``kvmon.core.fields`` or a series in ``kvmon.core.report_prometheus``) without its
row there fails here, named."""

from __future__ import annotations

from pathlib import Path

from every_field import every_field_snapshot

from kvmon.core.report_prometheus import snapshot_families

DOC = Path(__file__).resolve().parents[2] / "docs" / "exporter.md"


def test_every_family_of_a_full_snapshot_is_in_the_doc() -> None:
    doc = DOC.read_text(encoding="utf-8")
    families = snapshot_families(every_field_snapshot(), backend="llama-server", server="http://127.0.0.1:9931")
    assert len(families) > 60  # every part of the snapshot was exposed
    undocumented = sorted({f.name for f in families if f"`{f.name}" not in doc})
    assert not undocumented, f"families docs/exporter.md does not name: {', '.join(undocumented)}"

