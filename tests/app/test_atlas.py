"""The atlas of measured curves: points kept across sessions of one configuration and never mixed with another's,
a bounded file after 100,000 points, forgetting, and a damaged or newer file said clearly and left as it was."""

from __future__ import annotations

import random
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from kvmon.app.atlas import MAX_BYTES, Atlas, AtlasError, SessionCurves, default_atlas, remember_sweep
from kvmon.core.curve_config import AtlasView, CurveConfig, differences
from kvmon.core.snapshot import Connection, ConnectionStatus, SlotView, Snapshot
from kvmon.core.sweep import SweepResult, SweepRow

CFG = CurveConfig(backend="llama-server", server_version="b11549", model="tiny-llama", model_bytes=2_510_848,
                  quantization="F32", arch="llama", devices=("host",), weight_shares=(1.0,), kv_type_k="f16",
                  kv_type_v="f16", flash_attn="auto", n_ctx=8192, n_slots=1)


def _poll(cfg: CurveConfig, depth: int, tok_s: float, t: float = 1000.0) -> Snapshot:
    """A poll that measured ``tok_s`` at ``depth`` on ``cfg``."""
    return Snapshot(seq=1, t_monotonic=t, t_wall=t, connection=Connection(ConnectionStatus.CONNECTED),
                    slots=(SlotView(0, cfg.n_ctx, depth, True, tok_s),), context_tokens=depth, decode_tok_s=tok_s,
                    atlas=AtlasView(config=cfg))


def test_two_sessions_of_one_configuration_share_points_and_another_configuration_starts_clean(tmp_path: Path) -> None:
    path = tmp_path / "atlas.sqlite"
    first = SessionCurves(Atlas(path))
    for depth, tok_s in ((600, 61.0), (700, 60.0), (3000, 52.0)):
        first.observe(_poll(CFG, depth, tok_s))
    assert first.view(CFG).points == (), "a session's own polls are the store's, not earlier points"
    first.close()
    first.atlas.close()

    second = SessionCurves(Atlas(path))  # another run of kvmon, the same configuration
    earlier = second.view(CFG)
    assert [(round(p.context_tokens), round(p.decode_tok_s, 1), p.kind) for p in earlier.points] == [
        (650, 60.5, "earlier"), (3000, 52.0, "earlier")]  # 600 and 700 share the first 256-token bin
    assert earlier.deepest_tokens == 3000 and earlier.last_t_wall == 1000.0
    for other in (replace(CFG, kv_type_k="q8_0", kv_type_v="q8_0"), replace(CFG, n_ctx=16384),
                  replace(CFG, flash_attn="on"), replace(CFG, server_version="b11601"), replace(CFG, n_slots=4),
                  replace(CFG, devices=("RTX 3090",))):
        assert second.view(other).points == (), f"points leaked into {differences(CFG, other)}"


def test_a_sweep_shows_as_this_sessions_sweep_and_as_earlier_in_the_next(tmp_path: Path) -> None:
    atlas = Atlas(tmp_path / "atlas.sqlite")
    session = SessionCurves(atlas)
    rows = tuple(SweepRow(d, 60.0 - d / 1000, None, None, None, None, None, 64, "server") for d in (1, 4096, 8128))
    version = atlas.version
    session.add_sweep(SweepResult("http://127.0.0.1:1", "llama-server", "b11549", "tiny-llama", CFG, 64, rows,
                                  started_unix_s=500.0))
    assert atlas.version == version + 1, "the forecasts are told to ask again"
    assert {p.kind for p in session.view(CFG).points} == {"sweep"}
    later = SessionCurves(atlas)
    view = later.view(CFG)
    assert {p.kind for p in view.points} == {"earlier"} and view.sweeps == 1 and view.deepest_tokens == 8128
    assert atlas.sweep_docs()[0]["rows"][-1]["depth_tokens"] == 8128


def test_the_file_stays_within_its_bound_after_100000_points(tmp_path: Path) -> None:
    path = tmp_path / "atlas.sqlite"
    atlas = Atlas(path)
    rng = random.Random(7)
    configs = [replace(CFG, n_ctx=n) for n in (4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288)]
    for i in range(100_000):
        cfg = configs[i % len(configs)]
        atlas.add_point(cfg, rng.uniform(0, cfg.n_ctx or 1), rng.uniform(5, 80), f"session-{i // 5000}",
                        t_wall=float(i))
    atlas.close()
    assert path.stat().st_size <= MAX_BYTES
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM points").fetchone()[0] <= atlas.max_rows
    newest = SessionCurves(Atlas(path)).view(configs[-1])
    assert newest.points and max(p.t_wall for p in newest.points) >= 99_990.0, "the newest points are the ones kept"


def test_forget_measured_curves_empties_the_atlas(tmp_path: Path) -> None:
    atlas = Atlas(tmp_path / "atlas.sqlite")
    session = SessionCurves(atlas)
    session.observe(_poll(CFG, 1000, 50.0))
    session.close()
    assert SessionCurves(atlas).view(CFG).points
    atlas.forget()
    assert SessionCurves(atlas).view(CFG).points == () and atlas.configs() == []


def test_a_damaged_atlas_is_said_and_left_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "atlas.sqlite"
    path.write_bytes(b"this is not a database, and it must not be overwritten" * 100)
    before = path.read_bytes()
    session = SessionCurves(Atlas(path))
    assert session.view(CFG).points == ()
    assert session.problem is not None and str(path) in session.problem
    session.observe(_poll(CFG, 1000, 50.0))  # monitoring goes on; nothing is written
    session.close()
    assert path.read_bytes() == before
    with pytest.raises(AtlasError, match="not a database"):
        Atlas(path).configs()


def test_a_sweep_that_cannot_be_kept_says_why_and_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "atlas.sqlite"
    path.write_bytes(b"this is not a database, and it must not be overwritten" * 100)
    before = path.read_bytes()
    rows = (SweepRow(1, 60.0, None, None, None, None, None, 64, "server"),)
    result = SweepResult("http://127.0.0.1:1", "llama-server", "b11549", "tiny-llama", CFG, 64, rows)
    problem = remember_sweep(result, SessionCurves(Atlas(path)))
    assert problem is not None and str(path) in problem and "not a database" in problem
    assert path.read_bytes() == before
    assert remember_sweep(result, SessionCurves(Atlas(tmp_path / "fresh.sqlite"))) is None


def test_an_atlas_written_by_a_newer_kvmon_is_refused_not_changed(tmp_path: Path) -> None:
    path = tmp_path / "atlas.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version=99")
    with pytest.raises(AtlasError, match="newer kvmon"):
        Atlas(path).configs()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 99


def test_the_default_atlas_lives_in_the_data_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_atlas().path == tmp_path / "kvmon" / "atlas.sqlite"
