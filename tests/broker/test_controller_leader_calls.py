"""The leader-following retry of controller calls, driven by hand."""

from __future__ import annotations

import pytest

from triomq.controller.core.leader_calls import Attempt, GiveUp, LeaderCalls, Pause


def controllers() -> LeaderCalls:
    return LeaderCalls(["a", "b", "c"], timeout=3000, attempt_timeout=1000, retry_interval=50)


def test_a_round_tries_every_controller_then_pauses():
    call = controllers().start(0)
    tried = []
    for now in (0, 1000, 2000):
        step = call.next_step(now)
        assert isinstance(step, Attempt) and step.timeout == 1000
        tried.append(step.address)
        call.failed(step.address, "timed out")
    assert tried == ["a", "b", "c"]
    assert call.next_step(2900) == Pause(50)
    assert call.next_step(2950) == Attempt("a", 50)  # capped by the deadline
    call.failed("a", "timed out")
    assert call.next_step(3000) == GiveUp("a: timed out")


def test_a_hint_is_followed_at_once_and_remembered_across_calls():
    calls = controllers()
    call = calls.start(0)
    assert call.next_step(0) == Attempt("a", 1000)
    call.not_leader("a", "c")
    assert call.next_step(1) == Attempt("c", 1000)  # no pause, the hinted one first
    call.answered("c")
    assert calls.leader == "c"
    assert calls.start(10).next_step(10) == Attempt("c", 1000)
    assert calls.order() == ["c", "a", "b"]


def test_a_silent_or_deposed_leader_is_forgotten():
    calls = controllers()
    calls.leader = "b"
    call = calls.start(0)
    assert call.next_step(0).address == "b"
    call.failed("b", "reset")
    assert calls.leader is None
    calls.leader = "b"
    call.not_leader("b", None)
    assert calls.leader is None
    call.not_leader("a", "x")  # not one of ours: ignored
    assert calls.leader is None
    assert call.next_step(1).address == "a"


def test_a_call_may_have_its_own_timeout():
    call = controllers().start(0, timeout=100)
    assert call.next_step(0) == Attempt("a", 100)
    assert call.next_step(100) == GiveUp("no controller tried")


def test_controllers_are_required():
    with pytest.raises(ValueError):
        LeaderCalls([], timeout=1, attempt_timeout=1, retry_interval=1)
