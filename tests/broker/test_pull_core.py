"""The pure pull rules: header, admission, RocketMQ's getMessage statuses and answers, holds."""

from __future__ import annotations

import pytest

from triomq.broker.consume.core.pull import (
    GetMessageStatus,
    GetResult,
    PullAnswer,
    PullHeader,
    PullLimits,
    PullRefused,
    admit,
    answer,
    get_messages,
    parse_pull_header,
)
from triomq.broker.consume.core.pull_hold import HoldTable
from triomq.broker.consume.core.pull_lookup import look_up
from triomq.broker.consume.core.subscription import (
    Subscription,
    SubscriptionRefused,
    parse_subscription,
)
from triomq.broker.core.headers import HeaderError
from triomq.protocol.commitlog_layout import tags_code
from triomq.protocol.route import PERM_WRITE, TopicConfig
from triomq.store import QueueEntry

S = GetMessageStatus
ALL = Subscription()
LIMITS = PullLimits(memory_window=10_000)
SIZE = 100  # every record below is 100 bytes, back to back from physical offset 0


def entries(start: int, stop: int, tags: dict[int, str] | None = None) -> list[QueueEntry]:
    tags = tags or {}
    return [QueueEntry(q, q * SIZE, SIZE, tags_code(tags.get(q))) for q in range(start, stop)]


def header(offset: int, max_msg_nums: int = 32, **kwargs) -> PullHeader:
    return PullHeader("cg", "orders", 0, offset, max_msg_nums, **kwargs)


def get(offset: int, *, queue: tuple[int, int] = (0, 10), subscription=ALL, log_min=0,
        log_max=None, limits=LIMITS, correct=True, **kwargs) -> GetResult:
    lo, hi = queue
    found = entries(offset, hi) if lo <= offset < hi else []
    return get_messages(header(offset, **kwargs), subscription, min_offset=lo, max_offset=hi,
                        entries=found, log_min_offset=log_min,
                        log_max_offset=hi * SIZE if log_max is None else log_max,
                        limits=limits, correct_offsets=correct)


def test_statuses_and_next_begin_offsets() -> None:
    cases = [
        # (offset, queue range, status, nextBeginOffset)
        (0, (0, 0), S.NO_MESSAGE_IN_QUEUE, 0),
        (5, (0, 0), S.NO_MESSAGE_IN_QUEUE, 0),
        (2, (4, 10), S.OFFSET_TOO_SMALL, 4),
        (-1, (0, 10), S.OFFSET_TOO_SMALL, 0),
        (10, (0, 10), S.OFFSET_OVERFLOW_ONE, 10),
        (15, (0, 10), S.OFFSET_OVERFLOW_BADLY, 10),
        (3, (0, 10), S.FOUND, 10),
    ]
    for offset, queue, status, next_begin in cases:
        result = get(offset, queue=queue)
        assert (result.status, result.next_begin_offset) == (status, next_begin), offset
        assert (result.min_offset, result.max_offset) == queue


def test_a_slave_keeps_the_requested_offset_out_of_range() -> None:
    for offset, queue in [(5, (0, 0)), (2, (4, 10)), (15, (0, 10))]:
        assert get(offset, queue=queue, correct=False).next_begin_offset == offset


def test_no_entry_where_one_should_be_goes_to_the_next_consume_queue_file() -> None:
    result = get_messages(header(5), ALL, min_offset=0, max_offset=10, entries=[],
                          log_min_offset=0, log_max_offset=1000, limits=LIMITS)
    assert (result.status, result.next_begin_offset) == (S.OFFSET_FOUND_NULL, 300_000)


def test_records_are_the_entries_ranges_in_queue_order() -> None:
    result = get(2, queue=(0, 5))
    assert result.ranges == ((200, 100), (300, 100), (400, 100))
    assert result.size == 300 and not result.suggest_pulling_from_slave


def test_caps_by_count_and_bytes() -> None:
    assert len(get(0, max_msg_nums=3).ranges) == 3
    assert get(0, max_msg_nums=3).next_begin_offset == 3
    assert len(get(0, max_msg_bytes=250).ranges) == 2  # a third would pass 250 bytes
    assert len(get(0, max_msg_bytes=1).ranges) == 1  # at least 100 bytes, and one always goes
    assert len(get(0, max_msg_nums=0).ranges) == 1  # the first record always goes
    memory = PullLimits(max_transfer_count_on_message_in_memory=4, memory_window=10_000)
    assert len(get(0, limits=memory).ranges) == 4
    memory = PullLimits(max_transfer_bytes_on_message_in_memory=350, memory_window=10_000)
    assert len(get(0, limits=memory).ranges) == 3
    # Beyond the memory window the disk caps apply, and a slave is suggested.
    disk = PullLimits(max_transfer_count_on_message_in_disk=2, memory_window=0)
    result = get(0, limits=disk)
    assert len(result.ranges) == 2 and result.suggest_pulling_from_slave
    disk = PullLimits(max_transfer_bytes_on_message_in_disk=199, memory_window=0)
    assert len(get(0, limits=disk).ranges) == 1


def test_tag_filtering_by_tags_code() -> None:
    tagged = entries(0, 6, {0: "a", 1: "b", 2: "c", 3: "a", 5: "b"})
    subscription = parse_subscription("a || b")
    result = get_messages(header(0), subscription, min_offset=0, max_offset=6, entries=tagged,
                          log_min_offset=0, log_max_offset=600, limits=LIMITS)
    assert [offset for offset, _ in result.ranges] == [0, 100, 300, 500]
    # Nothing matches: NO_MATCHED_MESSAGE, past what was read.
    result = get_messages(header(2), parse_subscription("z"), min_offset=0, max_offset=6,
                          entries=tagged[2:], log_min_offset=0, log_max_offset=600,
                          limits=LIMITS)
    assert (result.status, result.next_begin_offset, result.ranges) == (
        S.NO_MATCHED_MESSAGE, 6, ())
    # The filter window: max_filter_message_size bytes of entries (20 each).
    window = PullLimits(max_filter_message_size=60, memory_window=10_000)
    result = get_messages(header(0, max_msg_nums=1), parse_subscription("z"), min_offset=0,
                          max_offset=6, entries=tagged, log_min_offset=0, log_max_offset=600,
                          limits=window)
    assert (result.status, result.next_begin_offset) == (S.NO_MATCHED_MESSAGE, 3)
    assert window.scan_count(1) == 3 and window.scan_count(10) == 10


def test_records_gone_from_the_log_are_skipped() -> None:
    result = get(0, queue=(0, 5), log_min=250)
    assert result.status == S.FOUND and [o for o, _ in result.ranges] == [300, 400]
    result = get(0, queue=(0, 3), log_min=1000)
    assert (result.status, result.next_begin_offset) == (S.MESSAGE_WAS_REMOVING, 3)


def answer_of(status: S, offset: int = 5, **kwargs):
    result = GetResult(status, 7, 0, 10, ((0, 100),) if status is S.FOUND else ())
    return answer(result, header(offset, sys_flag=kwargs.pop("sys_flag", 2)), **kwargs)


def test_answer_codes_by_status() -> None:
    expected = {S.FOUND: 0, S.NO_MATCHED_MESSAGE: 20, S.MESSAGE_WAS_REMOVING: 20,
                S.OFFSET_FOUND_NULL: 19, S.OFFSET_OVERFLOW_ONE: 19,
                S.OFFSET_OVERFLOW_BADLY: 21, S.OFFSET_TOO_SMALL: 21,
                S.NO_MESSAGE_IN_QUEUE: 21}
    for status, code in expected.items():
        reply = answer_of(status)
        assert (reply.code, reply.remark) == (code, status.value)
        assert reply.fields == {"suggestWhichBrokerId": "0", "nextBeginOffset": "7",
                                "minOffset": "0", "maxOffset": "10", "topicSysFlag": "0",
                                "groupSysFlag": "0"}
        assert bool(reply.ranges) == (code == 0)
        assert reply.hold == (code == 19)
    assert answer_of(S.NO_MESSAGE_IN_QUEUE, offset=0).code == 19
    assert not answer_of(S.OFFSET_OVERFLOW_ONE, sys_flag=0).hold  # no suspend flag
    assert not answer_of(S.OFFSET_OVERFLOW_ONE, allow_suspend=False).hold


def test_suggested_broker_and_slave_answers() -> None:
    slow = GetResult(S.FOUND, 7, 0, 10, ((0, 100),), suggest_pulling_from_slave=True)
    assert answer(slow, header(5)).fields["suggestWhichBrokerId"] == "0"
    assert answer(slow, header(5), slave_read_enable=True).fields["suggestWhichBrokerId"] == "1"
    # A slave with a master online: what is not found goes back to the master.
    reply = answer_of(S.OFFSET_OVERFLOW_ONE, is_master=False, slave_read_enable=True)
    assert (reply.code, reply.fields["suggestWhichBrokerId"], reply.hold) == (20, "0", False)
    assert answer_of(S.FOUND, is_master=False, slave_read_enable=True).code == 0
    # A slave while its group has no master answers as a master would...
    reply = answer_of(S.OFFSET_OVERFLOW_ONE, is_master=False, master_online=False)
    assert (reply.code, reply.hold) == (19, True)
    # ...except that it never moves an offset, unless offset_check_in_slave.
    assert answer_of(S.OFFSET_TOO_SMALL, is_master=False, master_online=False).code == 20
    assert answer_of(S.OFFSET_TOO_SMALL, is_master=False, master_online=False,
                     offset_check_in_slave=True).code == 21


def test_header_fields_are_required_and_numbers() -> None:
    fields = {"consumerGroup": "cg", "topic": "orders", "queueId": "1", "queueOffset": "-3",
              "maxMsgNums": "32", "sysFlag": "6", "commitOffset": "0",
              "suspendTimeoutMillis": "15000", "subscription": "a||b", "subVersion": "1",
              "expressionType": "TAG"}
    parsed = parse_pull_header(fields)
    assert (parsed.queue_offset, parsed.suspends, parsed.carries_subscription,
            parsed.commits_offset, parsed.max_msg_bytes) == (-3, True, True, False, None)
    assert parse_pull_header({**fields, "maxMsgBytes": "1024"}).max_msg_bytes == 1024
    for key, value in [("queueId", None), ("queueId", "x"), ("queueId", str(2**31)),
                       ("queueOffset", "1.5"), ("topic", ""), ("subVersion", None),
                       ("maxMsgBytes", "٣")]:
        bad = {k: v for k, v in {**fields, key: value}.items() if v is not None}
        with pytest.raises(HeaderError) as caught:
            parse_pull_header(bad)
        assert caught.value.field == key


def test_admission_in_rocketmqs_order() -> None:
    topic = TopicConfig("orders", 4, 4)
    none = lambda group, topic: None  # noqa: E731

    def refusal(head: PullHeader, config=topic, known=True, registered=none) -> int:
        with pytest.raises(PullRefused) as caught:
            admit(head, config, group_known=known, registered=registered)
        remark = caught.value.remark
        assert any(what in remark for what in ("orders", "cg", "subscription", "SQL92"))
        return caught.value.code

    carried = header(0, sys_flag=4, subscription="a")
    assert admit(carried, topic, group_known=True, registered=none).codes == {tags_code("a")}
    assert refusal(carried, known=False) == 26
    assert refusal(carried, config=None) == 17
    assert refusal(carried, config=TopicConfig("orders", 4, 4, PERM_WRITE)) == 16
    assert refusal(PullHeader("cg", "orders", 4, 0, 1, sys_flag=4)) == 29
    assert refusal(PullHeader("cg", "orders", -1, 0, 1, sys_flag=4)) == 29
    assert refusal(header(0, sys_flag=4, subscription="||")) == 23
    assert refusal(header(0, sys_flag=4, expression_type="SQL92", subscription="a > 1")) == 1
    assert refusal(header(0)) == 24  # no subscription carried, none registered
    registered = lambda group, topic: Subscription(sub_version=1)  # noqa: E731
    assert admit(header(0, sub_version=1), topic, group_known=True,
                 registered=registered) == Subscription(sub_version=1)
    assert refusal(header(0, sub_version=2), registered=registered) == 25


def test_subscription_expressions() -> None:
    assert parse_subscription("*").codes is None and parse_subscription("").codes is None
    assert parse_subscription(None, "TAG").codes is None
    assert parse_subscription(" a ||b|| ").codes == {tags_code("a"), tags_code("b")}
    assert parse_subscription("a").matches(tags_code("a"))
    assert not parse_subscription("a").matches(0)
    for expression, kind, code in [("||", None, 23), ("  ", None, 23), ("a\ud800", None, 23),
                                   ("a", "SQL92", 1), ("a", "REGEX", 23)]:
        with pytest.raises(SubscriptionRefused) as caught:
            parse_subscription(expression, kind)
        assert caught.value.code == code


def test_hold_table_releases_by_arrival_deadline_and_role_change() -> None:
    table: HoldTable[str] = HoldTable()
    assert table.next_deadline() is None
    a = table.hold("t", 0, 5, now=0.0, timeout=15.0, payload="a")
    b = table.hold("t", 0, 7, now=1.0, timeout=5.0, payload="b")
    c = table.hold("t", 1, 0, now=2.0, timeout=30.0, payload="c")
    assert len(table) == 3 and sorted(table.queues()) == [("t", 0), ("t", 1)]
    assert table.next_deadline() == 6.0
    assert table.arrived("t", 0, 5) == []  # nothing past offset 5 yet
    assert table.arrived("t", 0, 6) == [a]  # b waits beyond 7
    assert table.arrived("x", 0, 100) == []
    assert table.tick(5.9) == [] and table.tick(6.0) == [b]
    assert table.next_deadline() == 32.0
    table.drop(c)  # its consumer went away
    table.drop(c)
    assert len(table) == 0 and table.next_deadline() is None and list(table.queues()) == []
    d = table.hold("t", 0, 0, now=0.0, timeout=1.0, payload="d")
    e = table.hold("t", 2, 0, now=0.0, timeout=1.0, payload="e")
    assert table.release_all() == [d, e] and len(table) == 0


def test_hold_table_deadlines_stay_small_when_arrivals_release() -> None:
    table: HoldTable[int] = HoldTable()
    keep = table.hold("t", 1, 0, now=0.0, timeout=1000.0, payload=-1)
    for i in range(1000):
        table.hold("t", 0, i, now=float(i), timeout=100.0, payload=i)
        assert len(table.arrived("t", 0, i + 1)) == 1
    assert len(table._deadlines) < 200
    assert table.next_deadline() == 1000.0 and table.tick(1000.0) == [keep]


IN_MEMORY = PullLimits(memory_window=10**9)


class CountingQueue:
    """One queue ``orders``/0 of 100-byte records, counting the entries a pull reads."""

    def __init__(self, count: int, tags: dict[int, str] | None = None) -> None:
        self.entries = entries(0, count, tags)
        self.read = 0
        self.min_offset, self.max_offset = 0, count * SIZE

    def queue_min_offset(self, topic: str, queue_id: int) -> int:
        return 0

    def queue_max_offset(self, topic: str, queue_id: int) -> int:
        return len(self.entries)

    def queue_entries(self, topic: str, queue_id: int, start: int, max_count: int
                      ) -> list[QueueEntry]:
        got = self.entries[start:start + max_count]
        self.read += len(got)
        return got


def pull(store: CountingQueue, offset: int, subscription: Subscription = ALL) -> PullAnswer:
    # Every record in memory: RocketMQ's in-memory transfer cap (32) bounds the pull.
    return look_up(store, header(offset), subscription, limits=IN_MEMORY, topic=None,
                   confirm_offset=store.max_offset, is_master=True, master_online=True,
                   slave_read_enable=False, offset_check_in_slave=False, allow_suspend=False)


def test_a_pull_reads_the_consume_queue_only_as_far_as_it_goes() -> None:
    store = CountingQueue(10_000)
    answered = pull(store, 100)
    assert len(answered.ranges) == 32 and answered.fields["nextBeginOffset"] == "132"
    # The 33 entries the pull looks at and the queue's last (its confirmed end); not
    # the whole filter window (800 entries).
    assert store.read == 34
    # A tag filter reads on, chunk after growing chunk, until the window ends.
    store = CountingQueue(10_000, tags={700: "z"})
    answered = pull(store, 0, parse_subscription("z"))
    assert answered.ranges == ((700 * SIZE, SIZE),)
    assert 700 < store.read <= IN_MEMORY.scan_count(32) + 1
