"""The rules of servers that serve several models: status words, events between two listings, which model is
followed, and the GPU memory split per model process."""

from __future__ import annotations

from kvmon.core import serving
from kvmon.core.serving import FollowState, ListedModel, choose_followed, state_message, transition_events

A, B, C = "qwen3-8b", "gemma-3-12b", "gpt-oss-20b"


def _listing(**status: str) -> list[ListedModel]:
    return [ListedModel(name.replace("_", "-"), st) for name, st in status.items()]


def test_status_words_say_progress_and_failures() -> None:
    assert serving.status_word(ListedModel(A, serving.LOADING, progress=0.424)) == "loading 42 %"
    assert serving.status_word(ListedModel(A, serving.LOADING)) == "loading"
    assert serving.status_word(ListedModel(A, serving.FAILED, exit_code=1)) == "failed (exit 1)"
    assert serving.status_word(ListedModel(A, serving.SLEEPING)) == "sleeping"


def test_state_messages_for_a_router_with_nothing_to_show() -> None:
    nothing = [ListedModel(A, serving.UNLOADED), ListedModel(B, serving.UNLOADED)]
    assert state_message(serving.ROUTER, nothing) == \
        "llama-server router: no model loaded (2 available; it loads one on the first request)"
    assert state_message(serving.ROUTER, []) == "llama-server router: no models configured"
    assert state_message(serving.ROUTER, [ListedModel(A, serving.LOADING, progress=0.5)]) == "qwen3-8b loading 50 %"
    assert state_message(serving.LLAMA_SWAP, [ListedModel(A, serving.SLEEPING)]) == \
        "qwen3-8b sleeping (idle; unloaded until the next request)"
    assert state_message(serving.ROUTER, [ListedModel(A, serving.LOADED)]) is None


def test_events_between_two_listings() -> None:
    before = {m.name: m for m in [ListedModel(A, serving.LOADED), ListedModel(B, serving.UNLOADED),
                                   ListedModel(C, serving.LOADING), ListedModel("x", serving.SLEEPING)]}
    now = [ListedModel(A, serving.SLEEPING), ListedModel(B, serving.LOADING), ListedModel(C, serving.FAILED,
                                                                                          exit_code=1),
           ListedModel("x", serving.LOADED)]
    events = transition_events(before, now, 10.0, 1e9)
    assert [(e.model, e.kind) for e in events] == [(A, "sleeping"), (B, "loading"), (C, "failed"), ("x", "woke")]
    assert events[2].message == "gpt-oss-20b stopped with an error (exit 1)"
    assert all(e.t_monotonic == 10.0 for e in events)
    assert transition_events(None, now, 0.0, 0.0) == []  # the first listing is no change
    gone = transition_events({A: ListedModel(A, serving.LOADED)}, [], 1.0, 1.0)
    assert [(e.model, e.kind) for e in gone] == [(A, "unloaded")]
    assert transition_events({A: ListedModel(A, serving.LOADING)}, [ListedModel(A, serving.LOADED)], 1, 1)[0].kind \
        == "loaded"


def test_the_model_generating_is_followed_then_the_one_used_last() -> None:
    listing = [ListedModel(A, serving.LOADED), ListedModel(B, serving.LOADED), ListedModel(C, serving.UNLOADED)]
    st, followed, why = choose_followed(FollowState(), listing, {})
    assert (followed, why) == (A, "loaded first")
    st, followed, why = choose_followed(st, listing, {B: 40.0})
    assert (followed, why) == (B, "generating")
    st, followed, why = choose_followed(st, listing, {})  # B stopped generating: still the one used last
    assert (followed, why) == (B, "used last")
    st, followed, why = choose_followed(st, listing, {A: 10.0, B: 30.0})  # both: the faster one
    assert followed == B
    st, followed, why = choose_followed(st, listing, {A: 10.0}, pinned=A)
    assert (followed, why) == (A, "chosen")
    st, followed, why = choose_followed(st, listing, {B: 10.0}, pinned=C)  # a pinned model not running: ignored
    assert (followed, why) == (B, "generating")
    only = [ListedModel(A, serving.SLEEPING)]
    assert choose_followed(FollowState(), only, {})[1:] == (A, "the only model loaded")
    assert choose_followed(FollowState(), [ListedModel(A, serving.UNLOADED)], {})[1:] == (None, None)
    gone = choose_followed(st, [ListedModel(A, serving.LOADED), ListedModel(B, serving.UNLOADED)], {})
    assert gone[1] == A  # the one used last was unloaded: the loaded one


def test_a_model_being_unloaded_is_not_followed() -> None:
    """llama-swap swaps: the model chatted with is stopping because a request for another one came; that one loads.
    The one leaving was stopped on purpose (not a server gone): the one coming is shown, and with nothing else
    running, none (the serving process's own state)."""
    used = FollowState(A, A)
    swap = [ListedModel(A, serving.UNLOADING), ListedModel(B, serving.LOADING)]
    assert choose_followed(used, swap, {})[1] == B
    assert choose_followed(used, swap, {}, pinned=A)[1] == B
    assert choose_followed(used, [ListedModel(A, serving.UNLOADING)], {})[1:] == (None, None)
