"""LastAnswer: called again only when an input is another object (or another plain value)."""

from __future__ import annotations

from kvmon.core.same import LastAnswer


def test_the_same_objects_give_the_last_answer_without_a_call() -> None:
    calls: list[tuple[object, ...]] = []

    def merge(*xs: object) -> tuple[object, ...]:
        calls.append(xs)
        return xs

    memo: LastAnswer[tuple[object, ...]] = LastAnswer()
    a, b = {"n_ctx": 4096}, ("x",)
    assert memo.get(merge, a, b, 7) == (a, b, 7)
    assert memo.get(merge, a, b, 7) == (a, b, 7) and len(calls) == 1
    assert memo.get(merge, {"n_ctx": 4096}, b, 7) and len(calls) == 2  # equal, but another object: merged again
    memo.get(merge, {"n_ctx": 4096}, b, 8)
    assert len(calls) == 3  # another number
    memo.get(merge, calls[-1][0], b, 8.0)
    assert len(calls) == 4  # 8 and 8.0 are not the same input
    memo.clear()
    memo.get(merge, calls[-1][0], b, 8.0)
    assert len(calls) == 5
