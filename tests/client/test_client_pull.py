"""Pull headers, pull answers as results (tag filtering, offsets), and what the loop does next."""

from __future__ import annotations

import pytest

from triomq.client.core.message import MessageQueue
from triomq.client.core.process_queue import ProcessQueue
from triomq.client.core.pull import (
    FLAG_COMMIT_OFFSET,
    FLAG_SUBSCRIPTION,
    FLAG_SUSPEND,
    PullError,
    PullOutcome,
    PullResult,
    PullStatus,
    PullThresholds,
    pull_header,
    read_pull_response,
)
from triomq.protocol.commitlog_layout import tags_code
from triomq.protocol.heartbeat import SubscriptionData
from triomq.protocol.message import MessageRecord, encode

QUEUE = MessageQueue("t", "broker-a", 2)
ALL = SubscriptionData.build("t", "*", 7)
OFFSETS = {"nextBeginOffset": "12", "minOffset": "0", "maxOffset": "20",
           "suggestWhichBrokerId": "1"}


def records(*tags: str | None) -> bytes:
    out = b""
    for n, tag in enumerate(tags):
        props = {"UNIQ_KEY": f"U{n}"} if tag is None else {"TAGS": tag}
        out += encode(MessageRecord(topic="t", body=f"m{n}".encode(), queue_id=2,
                                    queue_offset=10 + n, physical_offset=1000 + n * 100,
                                    store_host=("10.0.0.1", 10911), properties=props))
    return out


def test_tag_expressions() -> None:
    sub = SubscriptionData.build("t", " a ||b|| ", 1)
    assert sub.tags_set == ("a", "b")
    assert sub.code_set == tuple(sorted((tags_code("a"), tags_code("b"))))
    assert sub.matches("a") and not sub.matches("c") and not sub.matches(None)
    for everything in ("*", "", None, " * "):
        assert SubscriptionData.build("t", everything, 1).all
    with pytest.raises(ValueError):
        SubscriptionData.build("t", "||", 1)


def test_header_flags() -> None:
    fields = pull_header("g", QUEUE, 5, 32, ALL, commit_offset=4)
    assert int(fields["sysFlag"]) == FLAG_COMMIT_OFFSET | FLAG_SUSPEND
    assert fields["commitOffset"] == "4" and fields["suspendTimeoutMillis"] == "15000"
    assert fields["queueOffset"] == "5" and fields["queueId"] == "2"
    assert "subscription" not in fields
    fields = pull_header("g", QUEUE, 5, 32, ALL, suspend_ms=None, with_subscription=True)
    assert int(fields["sysFlag"]) == FLAG_SUBSCRIPTION and fields["subscription"] == "*"


def test_found_messages_are_filtered_by_tag_and_carry_the_queue_bounds() -> None:
    sub = SubscriptionData.build("t", "a", 1)
    result = read_pull_response(0, None, OFFSETS, records("a", "b", None, "a"), QUEUE, sub)
    assert result.status is PullStatus.FOUND and result.next_begin_offset == 12
    assert result.suggest_which_broker_id == 1
    assert [m.queue_offset for m in result.messages] == [10, 13]
    first = result.messages[0]
    assert first.properties["MIN_OFFSET"] == "0" and first.properties["MAX_OFFSET"] == "20"
    assert first.broker_name == "broker-a" and first.message_queue == QUEUE
    assert first.offset_msg_id == "0A00000100002A9F00000000000003E8"
    assert first.msg_id == first.offset_msg_id  # no UNIQ_KEY
    every = read_pull_response(0, None, OFFSETS, records("a", None), QUEUE, ALL)
    assert every.messages[1].msg_id == "U1"


@pytest.mark.parametrize(("code", "status"), [(19, PullStatus.NO_NEW_MSG),
                                              (20, PullStatus.NO_MATCHED_MSG),
                                              (21, PullStatus.OFFSET_ILLEGAL)])
def test_other_statuses(code: int, status: PullStatus) -> None:
    result = read_pull_response(code, None, OFFSETS, b"", QUEUE, ALL)
    assert result.status is status and result.messages == ()


def test_refusals_and_bad_answers_raise() -> None:
    with pytest.raises(PullError) as raised:
        read_pull_response(24, "no subscription", OFFSETS, b"", QUEUE, ALL)
    assert raised.value.code == 24 and "SUBSCRIPTION_NOT_EXIST" in str(raised.value)
    with pytest.raises(PullError):
        read_pull_response(0, None, {"minOffset": "0"}, b"", QUEUE, ALL)


def test_outcomes() -> None:
    found = read_pull_response(0, None, OFFSETS, records("a"), QUEUE, ALL)
    assert PullOutcome.of(found) == PullOutcome(12, found.messages)
    assert PullOutcome.of(PullResult(PullStatus.NO_NEW_MSG, 12, 0, 12)) == PullOutcome(
        12, (), correct_offset=True)
    assert PullOutcome.of(PullResult(PullStatus.NO_MATCHED_MSG, 14, 0, 20)).correct_offset
    moved = PullOutcome.of(PullResult(PullStatus.OFFSET_ILLEGAL, 3, 3, 20))
    assert moved.offset_moved and moved.next_offset == 3 and not moved.correct_offset


def test_flow_control() -> None:
    from test_client_process_queue import msg

    pq = ProcessQueue()
    limits = PullThresholds(messages=2, size_mib=1, max_span=5)
    pq.put([msg(0), msg(1)])
    assert not limits.holds_back(pq)
    pq.put([msg(2)])
    assert limits.holds_back(pq)
    pq.remove([msg(1), msg(2)])
    pq.put([msg(9)])
    assert limits.holds_back(pq) and not limits.holds_back(pq, orderly=True)
    big = ProcessQueue()
    big.put([msg(0, b"x" * (1024 * 1024 + 1))])
    assert limits.holds_back(big)
