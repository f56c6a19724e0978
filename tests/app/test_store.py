"""The session store: one ``eat`` feeds history, points, events, tally and the last poll; the exporter's fleet devices
go through the same device analysis (the user's bandwidths) as a polled server's."""

from __future__ import annotations

from kvmon.app.store import SessionStore
from kvmon.cli.serve import Exporter
from kvmon.core.analysis import AnalyzerSettings
from kvmon.core.readings import GpuReading, GpuSetReading, HostReading
from kvmon.core.snapshot import Connection, ConnectionStatus, ModelView, SlotView, Snapshot

GIB = 1024**3


def _snap(seq: int, ctx: int | None = 1000, dec: float | None = 50.0, model: str = "m.gguf",
          status: ConnectionStatus = ConnectionStatus.CONNECTED) -> Snapshot:
    return Snapshot(seq=seq, t_monotonic=float(seq), t_wall=1.8e9 + seq, connection=Connection(status),
                    backend="llama-server", url="http://127.0.0.1:8080", model=ModelView(name=model, n_ctx=8192),
                    slots=(SlotView(id=0, n_ctx=8192, context_tokens=ctx, processing=dec is not None,
                                    decode_tok_s=dec),),
                    context_tokens=ctx, decode_tok_s=dec)


def test_one_eat_feeds_history_points_tally_and_the_last_poll() -> None:
    store = SessionStore(capacity=100)
    for i in range(1, 6):
        assert store.eat(_snap(i, ctx=1000 * i, dec=60.0 - i), duration_s=0.01 * i) is False
    assert len(store.history) == 5 and store.history.appended == 5
    assert store.tally.n == 5 and store.tally.summary().peak_context_tokens == 5000
    assert store.tally.summary().points == store.points.sample()  # the card's points are the history's
    assert store.last is not None and store.last.seq == 5
    assert (store.state.polls, store.state.errors, store.state.last_poll_duration_s) == (5, 0, 0.05)
    store.eat(_snap(6, status=ConnectionStatus.TIMEOUT, ctx=None, dec=None), error=True)
    assert (store.state.polls, store.state.errors) == (6, 1) and store.state.last_poll_duration_s == 0.05


def test_another_model_restarts_the_points_and_clear_forgets_the_whole_session() -> None:
    store = SessionStore(capacity=100)
    store.eat(_snap(1, ctx=1000))
    store.eat(_snap(2, ctx=2000))
    assert store.eat(_snap(3, ctx=500, model="other.gguf")) is True
    old_tally = store.tally
    store.clear()
    assert store.last is None and len(store.history) == 0 and store.tally is not old_tally and store.tally.n == 0
    assert store.state.polls == 0


def test_a_loaded_recording_reaches_the_tally_as_live_polls_do() -> None:
    store = SessionStore(capacity=100)
    assert store.load([_snap(i, ctx=100 * i) for i in range(1, 11)]) is False
    assert store.tally.n == 10 and store.last is not None and store.last.seq == 10 and len(store.history) == 10


def _gpus() -> GpuSetReading:
    return GpuSetReading(0.0, (
        GpuReading(index=0, name="NVIDIA GeForce RTX 4090", vram_total_bytes=24 * GIB, vram_used_bytes=2 * GIB,
                   vram_free_bytes=22 * GIB),
        GpuReading(index=1, name="AMD Radeon 780M", kind="unified_memory", vendor="amd", vram_total_bytes=8 * GIB,
                   vram_used_bytes=1 * GIB, vram_free_bytes=7 * GIB),
    ))


HOST = HostReading(0.0, ram_total_bytes=64 * GIB, ram_available_bytes=40 * GIB, host_bandwidth_bytes_per_s=60e9,
                   host_bandwidth_source="table")


class _Devices:
    """This machine's devices as a DevicePoller gives them (the readings above)."""

    def poll_gpus(self, server_pids: tuple[int, ...]) -> GpuSetReading:
        return _gpus()

    def poll_host(self, server_pids: tuple[int, ...]) -> HostReading:
        return HOST


class _Monitor:
    backend = "llama-server"

    def __init__(self) -> None:
        self.n = 0

    def poll(self) -> Snapshot:
        self.n += 1
        if self.n == 2:
            raise RuntimeError("a bug in kvmon")
        return _snap(self.n)

    def close(self) -> None:
        pass


def test_the_exporters_fleet_devices_carry_the_users_bandwidths_and_each_target_keeps_a_store() -> None:
    settings = AnalyzerSettings(gpu_bandwidth_bytes_per_s={0: 900e9}, host_bandwidth_bytes_per_s=80e9)
    e = Exporter(_Monitor(), devices=_Devices(), settings=settings, name="a")
    e.poll_once()
    e.poll_once()
    dev = e._view.devices
    assert dev is not None and dev.host is not None
    assert [g.peak_bandwidth_bytes_per_s for g in dev.gpus] == [900e9, 80e9]
    assert dev.host.host_bandwidth_bytes_per_s == 80e9
    st = e.targets[0].store.state
    assert (st.polls, st.errors) == (2, 1) and st.snapshot is not None
    assert st.snapshot.connection.status is not ConnectionStatus.CONNECTED  # the bug's poll is a failed state
    assert e.targets[0].store.tally.n == 2 and len(e.targets[0].store.history) == 2
