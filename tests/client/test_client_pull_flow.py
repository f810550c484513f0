"""One held queue's pulls (``PullFlow``), driven by hand with explicit times, no event loop.

Response codes are RocketMQ's numbers (ResponseCode.java): SUCCESS 0,
SYSTEM_BUSY 2, SERVICE_NOT_AVAILABLE 14, PULL_NOT_FOUND 19,
PULL_OFFSET_MOVED 21, SUBSCRIPTION_NOT_LATEST 25.
"""

from __future__ import annotations

import pytest

from triomq.client.core.consume_from import ConsumeFromWhere
from triomq.client.core.message import MessageQueue
from triomq.client.core.pull import PullThresholds
from triomq.client.core.pull_flow import (
    FetchRoutes,
    PullFlow,
    PullSettings,
    PullView,
    QueryMaxOffset,
    QueryStoredOffset,
    SearchOffset,
    SendPull,
    Wait,
)
from triomq.client.core.queue_pull import ConsumedOffsets, Dispatch, OffsetMoved
from triomq.protocol.heartbeat import SubscriptionData
from triomq.protocol.message import MessageRecord, encode

QUEUE = MessageQueue("t", "broker-a", 1)
OLD = {0: "tcp://10.0.0.1:10911", 1: "tcp://10.0.0.2:10911"}
NEW = {0: "tcp://10.0.0.2:10911"}
SUB = SubscriptionData.build("t", "*", 1)
SETTINGS = PullSettings("g", ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)


def flow(settings: PullSettings = SETTINGS, *, at: int = 0) -> tuple[PullFlow, ConsumedOffsets]:
    """A flow whose queue starts at ``at`` (the group's stored offset)."""
    offsets = ConsumedOffsets()
    f = PullFlow(QUEUE, settings, offsets)
    assert f.poll(0.0, PullView(OLD, SUB)) == QueryStoredOffset(zero_if_not_found=True)
    f.stored(at, 0.0)
    return f, offsets


def bounds(next_offset: int) -> dict[str, str]:
    return {"nextBeginOffset": str(next_offset), "minOffset": "0", "maxOffset": "100",
            "suggestWhichBrokerId": "0"}


def body(*offsets: int) -> bytes:
    return b"".join(encode(MessageRecord(topic="t", body=b"m%d" % o, queue_id=1,
                                         queue_offset=o, physical_offset=100 * o))
                    for o in offsets)


def test_a_stored_offset_is_where_the_pulls_start_and_what_they_carry_to_the_master() -> None:
    f, offsets = flow(at=5)
    assert offsets.read(QUEUE) == 5
    pull = f.poll(1.0, PullView(OLD, SUB))
    assert isinstance(pull, SendPull) and pull.address == OLD[0]
    assert pull.fields["queueOffset"] == "5" and pull.fields["commitOffset"] == "5"
    assert pull.commit_offset == 5


@pytest.mark.parametrize(("where", "zero", "lookup"), [
    (ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, True, QueryMaxOffset()),
    (ConsumeFromWhere.CONSUME_FROM_TIMESTAMP, False, SearchOffset(1_700_000_000_000)),
])
def test_without_a_stored_offset_the_start_is_looked_up(where, zero, lookup) -> None:
    settings = PullSettings("g", where, consume_timestamp_ms=1_700_000_000_000)
    f = PullFlow(QUEUE, settings, ConsumedOffsets())
    assert f.poll(0.0, PullView(OLD, SUB)) == QueryStoredOffset(zero_if_not_found=zero)
    f.stored(None, 0.0)
    assert f.poll(0.0, PullView(OLD, SUB)) == lookup
    f.failed(0.0)  # tried again after the delay
    assert f.poll(0.1, PullView(OLD, SUB)) == Wait(0.5)
    assert f.poll(0.5, PullView(OLD, SUB)) == lookup
    f.looked_up(42, 0.5)
    pull = f.poll(0.5, PullView(OLD, SUB))
    assert isinstance(pull, SendPull) and pull.fields["queueOffset"] == "42"
    assert pull.commit_offset is None  # no offset in memory: none to carry


def test_flow_control_a_pause_a_missing_lock_or_address_hold_the_pull_back() -> None:
    f, _ = flow(PullSettings("g", ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                             thresholds=PullThresholds(messages=1), orderly=True))
    assert f.poll(1.0, PullView(OLD, SUB, paused=True)) == Wait(1.05)
    assert f.poll(1.05, PullView(OLD, SUB, locked=False)) == Wait(1.55)
    assert f.poll(1.55, PullView({}, SUB)) == Wait(2.05)
    assert f.poll(2.05, PullView(OLD, None)) == Wait(2.55)
    pull = f.poll(2.55, PullView(OLD, SUB))
    assert isinstance(pull, SendPull)
    step = f.answered(0, None, bounds(3), body(0, 1, 2), OLD, 2.6)
    assert isinstance(step, Dispatch) and [m.queue_offset for m in step.messages] == [0, 1, 2]
    # Three held, one allowed: no pull until the listener catches up.
    assert f.poll(2.6, PullView(OLD, SUB)) == Wait(2.65)


def test_nothing_new_goes_on_at_once_and_a_moved_offset_drops_the_queue() -> None:
    f, _ = flow()
    f.poll(0.0, PullView(OLD, SUB))
    assert f.answered(19, None, bounds(0), b"", OLD, 0.1) is not None  # skipped to 0
    assert isinstance(f.poll(0.1, PullView(OLD, SUB)), SendPull)
    assert f.answered(21, "offset moved", bounds(30), b"", OLD, 0.2) == OffsetMoved(30)
    assert f.pull.process.dropped


def test_a_refusal_waits_the_delay_and_says_why() -> None:
    f, _ = flow()
    f.poll(0.0, PullView(OLD, SUB))
    assert f.answered(25, "subscription not latest", {}, b"", OLD, 1.0) is None
    assert "subscription not latest" in str(f.last_error)
    assert f.poll(1.2, PullView(OLD, SUB)) == Wait(1.5)
    assert isinstance(f.poll(1.5, PullView(OLD, SUB)), SendPull)


@pytest.mark.parametrize("code", [2, 14, None])
def test_a_master_gone_fetches_routes_until_they_change(code) -> None:
    f, _ = flow()
    f.poll(0.0, PullView(OLD, SUB))
    if code is None:
        f.unanswered(OLD, 3.0)
    else:
        f.answered(code, "not master", {}, b"", OLD, 3.0)
    assert f.poll(3.0, PullView(OLD, SUB)) == FetchRoutes()
    f.routes_fetched(OLD, 3.01)  # the same route: fetched again after a pause
    assert f.poll(3.02, PullView(OLD, SUB)) == Wait(pytest.approx(3.06))
    assert f.poll(3.06, PullView(OLD, SUB)) == FetchRoutes()
    f.routes_fetched(OLD, 3.06)
    assert f.poll(3.1, PullView(OLD, SUB)) == Wait(pytest.approx(3.16))  # doubled
    f.routes_fetched(NEW, 3.16)  # a new master: the next pull goes to it at once
    pull = f.poll(3.16, PullView(NEW, SUB))
    assert isinstance(pull, SendPull) and pull.address == NEW[0]


def test_an_unchanged_route_is_pulled_again_once_the_delay_is_over() -> None:
    f, _ = flow()
    f.poll(0.0, PullView(OLD, SUB))
    f.unanswered(OLD, 10.0)
    t = 10.0
    while isinstance(action := f.poll(t, PullView(OLD, SUB)), (FetchRoutes, Wait)):
        if isinstance(action, FetchRoutes):
            f.routes_fetched(OLD, t)
        else:
            t = action.until
        assert t <= 10.5
    assert isinstance(action, SendPull) and action.address == OLD[0]


def test_pauses_follow_the_drivers_unit_of_time() -> None:
    f, _ = flow(PullSettings("g", ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                             pull_delay_on_exception=300, flow_control_delay=50,
                             per_second=1000))
    f.poll(0, PullView(OLD, SUB))
    f.unanswered(OLD, 1000)
    assert f.poll(1000, PullView(OLD, SUB)) == FetchRoutes()
    f.routes_fetched(OLD, 1000)
    assert f.poll(1000, PullView(OLD, SUB)) == Wait(1050)
