"""The atlas of measured curves: every (depth, decode tok/s) a session or a sweep measured, filed by configuration
(``kvmon.core.curve_config``), in one small SQLite file in kvmon's data folder (``atlas.sqlite``; docs/sweep.md).

A session's points are kept as the mean per 256 tokens of depth (a day of polls at one depth is one row), a sweep's
one row per depth; every row says which run (a session, a sweep) measured it and when. The file is bounded: past
``MAX_ROWS`` rows the oldest go (and the configurations left with none), so it stays within ``MAX_BYTES`` however
long kvmon runs. ``forget()`` (Settings ▸ Forget measured curves) empties it.

One ``Atlas`` per file per process (``default_atlas``), safe to use from several threads; a session's points are
written every ``FLUSH_S`` and when it closes. Trouble with the file (a full disk, a locked or damaged database) is an
``AtlasError`` with one line for people; monitoring never stops for it.
"""

from __future__ import annotations

import atexit
import json
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvmon.core.curve_config import AtlasView, CurveConfig, CurvePoint
from kvmon.core.points import measured_point
from kvmon.core.snapshot import Snapshot
from kvmon.core.sweep import SweepResult

ATLAS_FILE = "atlas.sqlite"
SCHEMA_VERSION = 1
MAX_ROWS = 10_000  # rows of points kept in all; the oldest go first
MAX_BYTES = 4 * 1024 * 1024  # the file stays within this (documented; tested with 100,000 points)
MAX_SWEEPS = 100  # sweep documents kept (kvmon compare reads them)
BIN_TOKENS = 256
FLUSH_S = 15.0
BUSY_TIMEOUT_S = 2.0  # another kvmon writing the same file: wait this long, then skip this write

_SCHEMA = """
CREATE TABLE IF NOT EXISTS configs(id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, first_t REAL, last_t REAL);
CREATE TABLE IF NOT EXISTS points(config INTEGER NOT NULL, run TEXT NOT NULL, sweep INTEGER NOT NULL,
    bin INTEGER NOT NULL, n INTEGER NOT NULL, depth_sum REAL NOT NULL, tok_s_sum REAL NOT NULL, last_t REAL NOT NULL,
    PRIMARY KEY(config, run, bin)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS points_age ON points(last_t);
CREATE TABLE IF NOT EXISTS sweeps(run TEXT PRIMARY KEY, config INTEGER NOT NULL, t REAL NOT NULL, doc TEXT NOT NULL);
"""


class AtlasError(Exception):
    """The atlas file could not be read or written; the message says why in one line."""


@dataclass(frozen=True)
class ConfigSummary:
    """One configuration the atlas holds: what, how many points, the deepest depth, when, how many sweeps."""

    id: int
    config: CurveConfig
    points: int
    deepest_tokens: int
    last_t_wall: float
    sweeps: int


class Atlas:
    """One atlas file."""

    def __init__(self, path: str | Path, *, max_rows: int = MAX_ROWS) -> None:
        self.path = Path(path)
        self.max_rows = max_rows
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = None
        # (config, run, bin) -> [n, Σdepth, Σtok/s, t]
        self._pending: dict[tuple[CurveConfig, str, int], list[float]] = {}
        self._flushed_at = 0.0
        self.version = 0  # moves when a sweep is added or the atlas is emptied (the forecasts ask again)

    # -- the file

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, check_same_thread=False,
                                     isolation_level=None)
                db.execute("PRAGMA synchronous=NORMAL")
                version = db.execute("PRAGMA user_version").fetchone()[0]
                if version not in (0, SCHEMA_VERSION):
                    db.close()
                    raise AtlasError(f"{self.path} was written by a newer kvmon (atlas version {version})")
                db.executescript(_SCHEMA)
                db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            except OSError as exc:  # the database's own trouble is said by _db_of, which opens it
                raise AtlasError(f"{self.path}: {exc.strerror or exc}") from None
            self._db = db
        return self._db

    @contextmanager
    def _db_of(self) -> Iterator[sqlite3.Connection]:
        """The open file, under the lock; the database's trouble is an AtlasError."""
        with self._lock:
            try:
                yield self._conn()
            except sqlite3.DatabaseError as exc:
                raise AtlasError(f"{self.path}: {exc}") from None

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._db_of() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def _config_id(self, db: sqlite3.Connection, config: CurveConfig, t: float) -> int:
        key = config.key()
        db.execute("INSERT INTO configs(key, first_t, last_t) VALUES(?, ?, ?) ON CONFLICT(key) DO UPDATE SET "
                   "last_t = max(last_t, excluded.last_t)", (key, t, t))
        return int(db.execute("SELECT id FROM configs WHERE key = ?", (key,)).fetchone()[0])

    def close(self) -> None:
        """Write what is pending and close the file."""
        with self._lock:
            try:
                self.flush()
            finally:
                if self._db is not None:
                    self._db.close()
                    self._db = None

    # -- writing

    def add_point(self, config: CurveConfig, context_tokens: float, decode_tok_s: float, run: str,
                  t_wall: float | None = None) -> None:
        """One measured point of a session (kept in memory, written every ``FLUSH_S``)."""
        t = time.time() if t_wall is None else t_wall
        with self._lock:
            acc = self._pending.setdefault((config, run, int(context_tokens // BIN_TOKENS)), [0, 0.0, 0.0, t])
            acc[0] += 1
            acc[1] += context_tokens
            acc[2] += decode_tok_s
            acc[3] = t
            due = t - self._flushed_at >= FLUSH_S
        if due:
            self.flush()

    def flush(self) -> None:
        """Write the session points kept in memory."""
        with self._lock:
            pending, self._pending = self._pending, {}
            self._flushed_at = time.time()
            if not pending:
                return
            with self._tx() as db:
                for (config, run, b), (n, ds, ts, t) in pending.items():
                    db.execute(
                        "INSERT INTO points VALUES(?, ?, 0, ?, ?, ?, ?, ?) ON CONFLICT(config, run, bin) DO UPDATE "
                        "SET n = n + excluded.n, depth_sum = depth_sum + excluded.depth_sum, "
                        "tok_s_sum = tok_s_sum + excluded.tok_s_sum, last_t = excluded.last_t",
                        (self._config_id(db, config, t), run, b, n, ds, ts, t))
                self._trim(db)

    def add_sweep(self, result: SweepResult) -> str | None:
        """Keep a sweep: its points (one per depth) and its document; the run id it is filed under (None: a sweep
        that measured nothing, or whose configuration is not known)."""
        from kvmon.core.sweep_table import to_json

        pts = [(r.depth_tokens, r.decode_tok_s) for r in result.rows if r.decode_tok_s]
        if result.config is None or not pts:
            return None
        run = f"sweep-{uuid.uuid4().hex[:12]}"
        t = result.started_unix_s or time.time()
        with self._tx() as db:
            cid = self._config_id(db, result.config, t)
            for depth, tok_s in pts:
                db.execute("INSERT OR REPLACE INTO points VALUES(?, ?, 1, ?, 1, ?, ?, ?)",
                           (cid, run, int(depth // BIN_TOKENS), float(depth), float(tok_s), t))
            db.execute("INSERT INTO sweeps VALUES(?, ?, ?, ?)", (run, cid, t, json.dumps(to_json(result))))
            old = db.execute("SELECT run FROM sweeps ORDER BY t DESC LIMIT -1 OFFSET ?", (MAX_SWEEPS,)).fetchall()
            db.executemany("DELETE FROM sweeps WHERE run = ?", old)
            self._trim(db)
        with self._lock:
            self.version += 1
        return run

    def _trim(self, db: sqlite3.Connection) -> None:
        """Keep at most ``max_rows`` rows of points (the oldest go), and no configuration left without any."""
        count = int(db.execute("SELECT count(*) FROM points").fetchone()[0])
        if count <= self.max_rows:
            return
        keep = int(self.max_rows * 0.9)
        cut = db.execute("SELECT last_t FROM points ORDER BY last_t DESC LIMIT 1 OFFSET ?", (keep,)).fetchone()[0]
        db.execute("DELETE FROM points WHERE last_t <= ?", (cut,))
        db.execute("DELETE FROM sweeps WHERE config NOT IN (SELECT DISTINCT config FROM points)")
        db.execute("DELETE FROM configs WHERE id NOT IN (SELECT DISTINCT config FROM points)")

    def forget(self) -> None:
        """Forget every measured curve (Settings ▸ Forget measured curves); the file shrinks to nothing kept."""
        with self._lock:
            self._pending.clear()
            with self._tx() as db:
                for table in ("points", "sweeps", "configs"):
                    db.execute(f"DELETE FROM {table}")
            with self._db_of() as db:
                db.execute("VACUUM")
            self.version += 1

    # -- reading

    def view(self, config: CurveConfig, *, skip_run: str | None = None,
             this_session: Sequence[str] = ()) -> AtlasView:
        """What the atlas holds for ``config``: each row's mean point, marked "sweep" for this session's sweeps and
        "earlier" for the rest (rows of ``skip_run``, the session's own polls, are left out: the store has them)."""
        self.flush()
        with self._db_of() as db:
            row = db.execute("SELECT id FROM configs WHERE key = ?", (config.key(),)).fetchone()
            if row is None:
                return AtlasView(config=config)
            rows = db.execute("SELECT run, n, depth_sum, tok_s_sum, last_t FROM points WHERE config = ? "
                              "ORDER BY depth_sum / n", (row[0],)).fetchall()
            sweeps = int(db.execute("SELECT count(*) FROM sweeps WHERE config = ?", (row[0],)).fetchone()[0])
        mine = set(this_session)
        pts = tuple(CurvePoint(ds / n, ts / n, "sweep" if run in mine else "earlier", t)
                    for run, n, ds, ts, t in rows if run != skip_run and n > 0)
        last = max((p.t_wall for p in pts), default=None)
        return AtlasView(config=config, points=pts, sweeps=sweeps, last_t_wall=last)

    def configs(self) -> list[ConfigSummary]:
        """Every configuration held, most recently measured first."""
        self.flush()
        with self._db_of() as db:
            rows = db.execute(
                "SELECT c.id, c.key, count(p.bin), max(p.depth_sum / p.n), max(p.last_t), "
                "(SELECT count(*) FROM sweeps s WHERE s.config = c.id) FROM configs c JOIN points p "
                "ON p.config = c.id GROUP BY c.id ORDER BY max(p.last_t) DESC").fetchall()
        return [ConfigSummary(int(i), CurveConfig.from_json(json.loads(k)), int(n), int(d), float(t), int(s))
                for i, k, n, d, t, s in rows]

    def sweep_docs(self, config_id: int | None = None) -> list[dict[str, Any]]:
        """The sweeps kept (their JSON documents), newest first; of one configuration when ``config_id`` is given."""
        with self._db_of() as db:
            q = "SELECT doc FROM sweeps" + (" WHERE config = ?" if config_id is not None else "") + " ORDER BY t DESC"
            rows = db.execute(q, () if config_id is None else (config_id,)).fetchall()
        return [json.loads(r[0]) for r in rows]


_OPEN: dict[Path, Atlas] = {}
_OPEN_LOCK = threading.RLock()


def default_atlas() -> Atlas:
    """The atlas in kvmon's data folder now (XDG_DATA_HOME/kvmon on Linux, the platform's own elsewhere; one object
    per file in this process, written at exit)."""
    import platformdirs

    path = Path(platformdirs.user_data_dir("kvmon", appauthor=False)) / ATLAS_FILE
    with _OPEN_LOCK:
        if path not in _OPEN:
            _close_all()  # the data folder moved (another user folder): the old file is done with
            _OPEN[path] = Atlas(path)
        return _OPEN[path]


@atexit.register
def _close_all() -> None:
    with _OPEN_LOCK:
        for atlas in _OPEN.values():
            with suppress(AtlasError):
                atlas.close()
        _OPEN.clear()


class SessionCurves:
    """One monitoring session's side of the atlas: its run id, its sweeps, the points its polls measured.

    The analysis asks ``view`` for the earlier points of the configuration (``kvmon.core.curve_config.CurveMemory``);
    the monitor gives it every Snapshot (``observe``), whose point is filed under the Snapshot's configuration.
    """

    def __init__(self, atlas: Atlas | None = None) -> None:
        self.atlas = atlas or default_atlas()
        self.run = f"session-{uuid.uuid4().hex[:12]}"
        self.sweeps: list[str] = []
        self.problem: str | None = None  # why the atlas is not kept (the file's trouble), once it happened

    @property
    def version(self) -> int:
        return self.atlas.version

    def view(self, config: CurveConfig) -> AtlasView:
        if self.problem is None:
            try:
                return self.atlas.view(config, skip_run=self.run, this_session=self.sweeps)
            except AtlasError as exc:
                self.problem = str(exc)
        return AtlasView(config=config)

    def observe(self, s: Snapshot) -> None:
        """File this poll's measured point, if it has one, under its configuration."""
        cfg = s.atlas.config if s.atlas is not None else None
        point = measured_point(s.slots, s.context_tokens, s.decode_tok_s, s.decode_rate_source)
        if cfg is None or point is None or self.problem is not None:
            return
        try:
            self.atlas.add_point(cfg, point[0], point[1], self.run, s.t_wall)
        except AtlasError as exc:
            self.problem = str(exc)

    def add_sweep(self, result: SweepResult) -> None:
        """Keep a sweep this session ran: its points show with the sweep's marker, and the forecast uses them.
        Raises AtlasError when the file cannot be written."""
        run = self.atlas.add_sweep(result)
        if run is not None:
            self.sweeps.append(run)

    def close(self) -> None:
        """The session ended: what its polls measured is written now."""
        try:
            self.atlas.flush()
        except AtlasError as exc:
            self.problem = str(exc)


def remember_sweep(result: SweepResult, curves: SessionCurves | None = None) -> str | None:
    """Keep a sweep in the atlas, through the session that ran it when there is one (the dashboard's plot marks its
    points and the forecast is fitted on them); why it could not be kept, or None."""
    try:
        (curves or default_atlas()).add_sweep(result)
    except AtlasError as exc:
        return str(exc)
    return None


def atlas_enabled() -> bool:
    """Whether live sessions keep their points (``KVMON_NO_ATLAS=1`` turns it off)."""
    return os.environ.get("KVMON_NO_ATLAS", "") in ("", "0")
