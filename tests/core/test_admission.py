"""Open connections bounded per client address and in all; past a bound, the one waiting longest for its request
head (long enough that no honest client would) is closed for the newcomer, else the newcomer is refused."""

from __future__ import annotations

from kvmon.core.admission import Admission


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_one_address_is_bounded_and_its_oldest_waiting_connection_makes_room() -> None:
    clock, closed = Clock(), []
    a = Admission(per_address=2, total=10, evict_after_s=1.0, clock=clock)
    assert a.admit("a1", "10.0.0.5", lambda: closed.append("a1"))
    clock.t += 0.5
    assert a.admit("a2", "10.0.0.5", lambda: closed.append("a2"))
    assert not a.admit("a3", "10.0.0.5", lambda: closed.append("a3"))  # nobody waited a second yet: refused
    assert a.admit("b1", "10.0.0.6", lambda: closed.append("b1"))  # another address is not affected
    clock.t += 1.0
    assert a.admit("a4", "10.0.0.5", lambda: closed.append("a4"))  # a1 waited 1.5 s for its head: closed for a4
    assert closed == ["a1"] and a.refused == 1 and a.evicted == 1 and len(a) == 3


def test_a_connection_being_served_is_never_closed_for_another() -> None:
    clock, closed = Clock(), []
    a = Admission(per_address=1, total=10, clock=clock)
    a.admit("x", "h", lambda: closed.append("x"))
    a.started("x")
    clock.t += 60
    assert not a.admit("y", "h", lambda: closed.append("y")) and closed == []
    a.waiting("x")  # kept alive, waiting for its next request: it waits from now
    assert not a.admit("y", "h", lambda: closed.append("y"))
    clock.t += 2
    assert a.admit("y", "h", lambda: closed.append("y")) and closed == ["x"]


def test_the_total_is_bounded_over_every_address() -> None:
    clock = Clock()
    a = Admission(per_address=100, total=3, clock=clock)
    for i in range(3):
        assert a.admit(i, f"10.0.0.{i}", lambda: None)
    assert not a.admit(9, "10.0.0.9", lambda: None)
    a.release(1)
    assert a.admit(9, "10.0.0.9", lambda: None) and a.since(9) == clock.t
