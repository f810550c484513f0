"""Pop consumption's pure rules without an event loop: receipt handles as RocketMQ's
``ExtraInfoUtil`` writes them, the revive topic's JSON records, a pop's picks and the
revive flow's pairing of checkpoints with acks."""

from __future__ import annotations

import base64
import contextlib
import json

from hypothesis import given
from hypothesis import strategies as st

from triomq.broker.consume.core.subscription import parse_subscription
from triomq.broker.pop.core.batch_ack import parse_batch_ack
from triomq.broker.pop.core.checkpoint import (
    AckMsg,
    CheckPoint,
    RecordRefused,
    decode_ack,
    decode_checkpoint,
)
from triomq.broker.pop.core.pop import PopHeader, PopRefused, parse_pop_header, plan_pop
from triomq.broker.pop.core.receipt import (
    Receipt,
    ReceiptRefused,
    parse_offset_info,
    parse_receipt,
    receipt_refusal,
)
from triomq.broker.pop.core.revive import (
    NotRevived,
    ReadMessage,
    ReadRevive,
    Revive,
    ReviveQueue,
    ReviveRecord,
    StoreReviveOffset,
    WakeAt,
    popped_record,
    revive_records,
)
from triomq.protocol.message import MessageRecord
from triomq.protocol.route import TopicConfig

NOW = 1_700_000_000_000


def test_a_receipt_handle_reads_as_rocketmq_writes_it() -> None:
    # ExtraInfoUtil.buildExtraInfo(ckQueueOffset, popTime, invisibleTime, reviveQid,
    # topic, brokerName, queueId, msgQueueOffset), joined by a space.
    receipt = parse_receipt(f"5 {NOW} 30000 3 1 broker-a 2 7")
    assert receipt == Receipt(5, NOW, 30000, 3, "1", "broker-a", 2, 7)
    assert receipt.encode() == f"5 {NOW} 30000 3 1 broker-a 2 7"
    assert parse_receipt(f"5 {NOW} 30000 3 0 broker-a 2").offset is None
    assert parse_offset_info("0 1 5;1 0 0") == {("0", 1): [5], ("1", 0): [0]}
    assert parse_offset_info("0 1 5,6,9") == {("0", 1): [5, 6, 9]}
    assert parse_offset_info("0 1 5;0 1 6") is None


def check(text: str, **kwargs) -> ReceiptRefused | None:
    receipt = parse_receipt(text)
    if isinstance(receipt, ReceiptRefused):
        return receipt
    fields = {"topic": "orders", "group": "cg", "queue_id": 2, "offset": 7,
              "now_ms": NOW + 1000, "revive_queue_num": 8, **kwargs}
    return receipt_refusal(receipt, **fields)


def test_forged_and_stale_handles_are_refused_with_what_is_wrong() -> None:
    assert check(f"5 {NOW} 30000 3 0 broker-a 2 7") is None
    # Another broker's handle is taken: its ack cancels that broker's checkpoint.
    assert check(f"5 {NOW} 30000 3 0 broker-b 2 7") is None
    for text, fragment in [
        ("5 x 30000 3 0 b 2 7", "field 2"), ("5 1 2", "3 fields"),
        (f"5 {NOW} 30000 3 4 b 2 7", "kind"), (f"5 {NOW} 30000 9 0 b 2 7", "revive queue 9"),
        (f"5 {NOW} 30000 999 0 b 2 7", "orderly"), (f"5 {NOW} 30000 3 0 b 1 7", "queue 1"),
        (f"5 {NOW} 30000 3 0 b 2 6", "offset 6"), (f"8 {NOW} 30000 3 0 b 2 7", "after"),
        (f"5 {NOW} 30000 3 1 b 2 7", "kind 1"), (f"5 {NOW + 5000} 30000 3 0 b 2 7", "future"),
        (f"5 {NOW} -1 3 0 b 2 7", "field 3"), (f"5 {NOW} 30000 3 0  2 7", "broker name"),
    ]:
        refused = check(text)
        assert refused is not None and refused.code == 29 and fragment in refused.remark, text
    stale = check(f"5 {NOW - 60_000} 30000 3 0 b 2 7")
    assert stale is not None and stale.code == 208 and "expired" in stale.remark
    assert check(f"5 {NOW} 30000 3 1 b 0 7", topic="%RETRY%cg_orders", queue_id=0) is None


@given(st.text(max_size=80))
def test_any_text_is_a_handle_or_a_refusal(text: str) -> None:
    assert isinstance(parse_receipt(text), Receipt | ReceiptRefused)
    parse_offset_info(text)


def test_checkpoints_and_acks_are_rocketmq_json() -> None:
    ck = CheckPoint(topic="orders", group="cg", queue_id=1, start_offset=10, pop_time=NOW,
                    invisible_time=5000, broker_name="broker-a", offset_diffs=[0, 2])
    fields = json.loads(ck.encode())
    assert {k: fields[k] for k in ("so", "pt", "it", "bm", "n", "q", "t", "c", "d", "bn")} == {
        "so": 10, "pt": NOW, "it": 5000, "bm": 0, "n": 2, "q": 1, "t": "orders", "c": "cg",
        "d": [0, 2], "bn": "broker-a"}
    assert decode_checkpoint(ck.encode()) == ck
    assert ck.unique_id() == f"orders@1@10@cg@{NOW}@broker-a@ck"
    # An old checkpoint without "d": n consecutive offsets.
    old = decode_checkpoint(json.dumps({"so": 4, "pt": NOW, "it": 1, "n": 3, "q": 0,
                                        "t": "orders", "c": "cg"}).encode())
    assert old.offsets == (4, 5, 6) and old.broker_name == ""
    ack = AckMsg(topic="orders", group="cg", queue_id=1, start_offset=10, pop_time=NOW,
                 broker_name="broker-a", offsets=[12])
    assert json.loads(ack.encode())["ao"] == 12
    assert decode_ack(ack.encode(), batch=False) == ack
    assert ack.unique_id() == f"orders@1@12@cg@{NOW}@broker-a@ack"
    assert ack.merge_key == ck.merge_key
    long_names = json.dumps({"ackOffset": 12, "startOffset": 10, "consumerGroup": "cg",
                             "topic": "orders", "queueId": 1, "popTime": NOW,
                             "brokerName": "broker-a"}).encode()
    assert decode_ack(long_names, batch=False) == ack
    batch = decode_ack(json.dumps({"aol": [10, 12], "so": 10, "c": "cg", "t": "orders",
                                   "q": 1, "pt": NOW, "bn": "broker-a"}).encode(), batch=True)
    assert batch.offsets == (10, 12) and batch.tag == "bAck"


@given(st.binary(max_size=200))
def test_any_bytes_are_a_record_or_refused(body: bytes) -> None:
    for decode in (decode_checkpoint, lambda b: decode_ack(b, batch=False),
                   lambda b: decode_ack(b, batch=True)):
        with contextlib.suppress(RecordRefused):
            decode(body)


def pop_fields(**more: str) -> dict[str, str]:
    return {"consumerGroup": "cg", "topic": "orders", "queueId": "-1", "maxMsgNums": "32",
            "invisibleTime": "5000", "pollTime": "0", "bornTime": "1", "initMode": "1", **more}


def test_pop_headers_are_checked_field_by_field() -> None:
    assert parse_pop_header(pop_fields()).queue_id == -1
    for more, fragment in [({"invisibleTime": "-1"}, "'invisibleTime': -1 is negative"),
                           ({"maxMsgNums": "33"}, "'maxMsgNums'"),
                           ({"pollTime": "-3"}, "'pollTime'"), ({"initMode": "2"}, "initMode"),
                           ({"queueId": "-2"}, "'queueId'"), ({"order": "true"}, "orderly"),
                           ({"topic": ""}, "'topic'")]:
        try:
            parse_pop_header(pop_fields(**more))
        except PopRefused as exc:
            assert exc.code == 29 and fragment in exc.remark
        else:
            raise AssertionError(more)


class Store:
    """Two queues of "orders" and the retry topic: entries as the store gives them."""

    min_offset, max_offset = 0, 10_000

    def __init__(self) -> None:
        self.queues = {("orders", 0): [(o, 100 * o, 100, 1 if o % 2 else 2) for o in range(3)],
                       ("orders", 1): [], ("%RETRY%cg_orders", 0): [(0, 9000, 100, 7)]}

    def queue_min_offset(self, topic: str, queue_id: int) -> int:
        return 0

    def queue_max_offset(self, topic: str, queue_id: int) -> int:
        return len(self.queues[topic, queue_id])

    def queue_entries(self, topic: str, queue_id: int, start: int, max_count: int):
        return self.queues[topic, queue_id][start:start + max_count]


def plan(header: PopHeader, **kwargs):
    options = {"topic": TopicConfig("orders", 2, 2), "retry": TopicConfig("%RETRY%cg_orders", 1, 1),
               "random_q": 50, "pop_offset": lambda topic, queue: None,
               "confirm_offset": 10_000,
               "pop_from_retry_probability": 20, "scan_limit": 800, **kwargs}
    return plan_pop(Store(), header, parse_subscription("*"), **options)


def test_a_pop_reads_the_topic_then_its_retry_topic() -> None:
    header = parse_pop_header(pop_fields())
    popped = plan(header)
    assert [(p.topic, p.queue_id, [e[0] for e in p.entries], p.next_offset)
            for p in popped.picks] == [("orders", 0, [0, 1, 2], 3), ("orders", 1, [], 0),
                                       ("%RETRY%cg_orders", 0, [0], 1)]
    assert popped.offset_infos() == ("0 0 0;1 0 0", "0 0 0,1,2;1 0 0")
    # random_q below pop_from_retry_probability: the retry topic first.
    assert plan(header, random_q=5).picks[0].topic == "%RETRY%cg_orders"
    # A tag filter takes what matches and moves past the rest.
    tagged = plan_pop(Store(), header, parse_subscription("x"), topic=TopicConfig("orders", 2, 2),
                      retry=None, random_q=0, pop_offset=lambda t, q: 1,
                      confirm_offset=10_000, pop_from_retry_probability=20, scan_limit=800)
    pick = tagged.picks[0]
    assert [(p.queue_id, p.entries) for p in tagged.picks] == [(0, ()), (1, ())]
    assert pick.start_offset == 1 and pick.next_offset == 3
    ck = pick.checkpoint(header, NOW, "broker-a")
    assert ck.start_offset == 1 and ck.offset_diffs == tuple(e[0] - 1 for e in pick.entries)
    # At most maxMsgNums; what is left is counted.
    two = plan(parse_pop_header(pop_fields(maxMsgNums="2", queueId="0")), retry=None)
    assert [len(p.entries) for p in two.picks] == [2] and two.rest() == 1


def record(offset: int, body: bytes = b"m") -> MessageRecord:
    return MessageRecord(topic="orders", body=body, queue_id=0, queue_offset=offset,
                         properties={"TAGS": "t", "UNIQ_KEY": f"K{offset}"})


def ck_record(at: int, ck: CheckPoint) -> ReviveRecord:
    return ReviveRecord(at, "ck", ck.encode())


def ack_record(at: int, ck: CheckPoint, offset: int, broker: str = "broker-a") -> ReviveRecord:
    return ReviveRecord(at, "ack", AckMsg(ck.topic, ck.group, ck.queue_id, ck.start_offset,
                                          ck.pop_time, broker, [offset]).encode())


CK = CheckPoint(topic="orders", group="cg", queue_id=0, start_offset=0, pop_time=NOW,
                invisible_time=5000, broker_name="broker-a", offset_diffs=[0, 1, 2])


def test_the_revive_puts_back_only_what_was_not_acked_once_due() -> None:
    flow = ReviveQueue(0, -1, broker_name="broker-a", interval_ms=1000)
    assert flow.start(NOW) == [ReadRevive(0, 0, 32)]
    # Not due yet: nothing revived, the offset stays before the checkpoint.
    actions = flow.records_read([ck_record(0, CK), ack_record(1, CK, 1)], NOW + 100)
    assert actions == [WakeAt(NOW + 1100)]
    later = NOW + 5000 + 2000
    assert flow.woke(later) == [ReadRevive(0, 2, 32)]
    actions = flow.records_read([ack_record(2, CK, 0)], later)
    assert actions == [ReadMessage("orders", 0, 2, "broker-a")]
    (put,) = flow.message_read(record(2, b"m2"), later)
    assert isinstance(put, Revive)
    message = put.message
    assert (message.topic, message.queue_id, message.body, message.reconsume_times) == (
        "%RETRY%cg_orders", 0, b"m2", 1)
    assert message.properties["1ST_POP_TIME"] == str(NOW)
    assert message.properties["UNIQ_KEY"] == "K2"
    # Done with the checkpoint: the offset moves past the last record read.
    assert flow.put_done(True, later) == [StoreReviveOffset(0, 2), WakeAt(later + 1000)]
    assert flow.pending == {}


def test_a_failed_put_is_tried_again_and_another_brokers_ack_cancels_its_checkpoint() -> None:
    flow = ReviveQueue(0, 4, broker_name="broker-a", interval_ms=1000)
    other = CheckPoint(topic="orders", group="cg", queue_id=1, start_offset=0, pop_time=NOW,
                       invisible_time=5000, broker_name="broker-b", offset_diffs=[0])
    assert flow.start(NOW) == [ReadRevive(0, 5, 32)]
    due = NOW + 8000
    actions = flow.records_read([ck_record(5, CK), ck_record(6, other),
                                 ack_record(7, other, 0, "broker-b"),
                                 ack_record(8, CK, 0), ack_record(9, CK, 1)], due)
    assert actions == [ReadMessage("orders", 0, 2, "broker-a")]
    assert list(flow.pending) == [CK.merge_key]
    (put,) = flow.message_read(record(2), due)
    assert isinstance(put, Revive)
    # The put failed: the checkpoint stays pending, its offset does not move past it.
    assert flow.put_done(False, due) == [WakeAt(due + 1000)]
    assert flow.woke(due + 1000) == [ReadRevive(0, 10, 32)]
    assert flow.records_read([], due + 1000) == [ReadMessage("orders", 0, 2, "broker-a")]
    (put,) = flow.message_read(record(2), due + 1000)
    assert flow.put_done(True, due + 1000) == [StoreReviveOffset(0, 9), WakeAt(due + 2000)]


def test_a_message_gone_is_skipped_and_another_groups_is_read_from_that_group() -> None:
    flow = ReviveQueue(0, -1, broker_name="broker-a", interval_ms=1000)
    # An acting slave's pop of broker-b, its checkpoint escaped to this master.
    other = CheckPoint(topic="orders", group="cg", queue_id=1, start_offset=0, pop_time=NOW,
                       invisible_time=5000, broker_name="broker-b", offset_diffs=[0])
    one = CheckPoint(topic="orders", group="cg", queue_id=0, start_offset=3, pop_time=NOW,
                     invisible_time=5000, broker_name="broker-a", offset_diffs=[0])
    actions = flow.records_read([ck_record(0, other), ck_record(1, one),
                                 ReviveRecord(2, "zz", b"{}"), ReviveRecord(3, "ck", b"{")],
                                NOW + 9000)
    skipped = [a for a in actions if isinstance(a, NotRevived)]
    assert len(skipped) == 2
    assert actions[-1] == ReadMessage("orders", 1, 0, "broker-b")
    # None of broker-b's replicas answered: tried again after the interval, still pending.
    assert flow.read_failed(NOW + 9000) == [WakeAt(NOW + 10_000)]
    assert flow.woke(NOW + 10_000) == [ReadRevive(0, 4, 32)]
    assert flow.records_read([], NOW + 10_000)[-1] == ReadMessage("orders", 1, 0, "broker-b")
    (put,) = flow.message_read(record(0), NOW + 10_000)
    assert isinstance(put, Revive) and put.checkpoint == other
    assert flow.put_done(True, NOW + 10_000) == [ReadMessage("orders", 0, 3, "broker-a")]
    done = flow.message_read(None, NOW + 10_000)
    assert isinstance(done[0], NotRevived) and "no longer stored" in done[0].reason
    assert done[1:] == [StoreReviveOffset(0, 3), WakeAt(NOW + 11_000)]


def test_a_batch_ack_body_reads_as_fastjson_writes_it() -> None:
    # BitSet.toByteArray of {0, 3, 9}: bytes 0b00001001, 0b00000010.
    bits = base64.b64encode(bytes([0b1001, 0b10])).decode()
    body = json.dumps({"brokerName": "broker-b", "acks": [
        {"c": "cg", "t": "orders", "r": "1", "so": 10, "q": 0, "rq": 2, "pt": NOW,
         "it": 5000, "b": bits}]}).encode()
    broker, (ack,) = parse_batch_ack(body)
    assert broker == "broker-b"
    assert (ack.topic, ack.offsets, ack.revive_queue_id) == ("%RETRY%cg_orders", (10, 13, 19), 2)
    assert ack.receipt("broker-b", 13).encode() == f"10 {NOW} 5000 2 1 broker-b 0 13"
    for bad, code in [(b"", 208), (b'{"acks": []}', 208), (b"[1]", 29), (b"{", 29),
                      (b'{"acks": [{"r": "0"}]}', 29)]:
        try:
            parse_batch_ack(bad)
        except PopRefused as exc:
            assert exc.code == code, bad
        else:
            raise AssertionError(bad)


@given(st.binary(max_size=200))
def test_any_batch_ack_body_is_read_or_refused(body: bytes) -> None:
    with contextlib.suppress(PopRefused):
        parse_batch_ack(body)


@given(st.dictionaries(st.sampled_from(sorted(pop_fields())), st.text(max_size=12)))
def test_any_pop_header_is_read_or_refused(changes: dict[str, str]) -> None:
    with contextlib.suppress(PopRefused):
        header = parse_pop_header(pop_fields(**changes))
        assert header.invisible_time >= 0 and 0 < header.max_msg_nums <= 32


class CutStore(Store):
    """The store above with "orders" queue 0 cut below offset 1, as a clean-up leaves it."""

    def queue_min_offset(self, topic: str, queue_id: int) -> int:
        return 1 if (topic, queue_id) == ("orders", 0) else 0

    def queue_entries(self, topic: str, queue_id: int, start: int, max_count: int):
        return [e for e in super().queue_entries(topic, queue_id, start, max_count)
                if e[0] >= self.queue_min_offset(topic, queue_id)]


def test_the_revive_reads_its_queue_from_its_first_entry_up_to_the_confirmed_end() -> None:
    bodies = {100 * o: MessageRecord(topic="orders", body=b"r%d" % o,
                                     properties={"TAGS": "ck"}) for o in range(3)}
    read = ReadRevive(0, 0, 32)
    # Cut below the offset asked: from the first entry; the confirmed end stops it.
    got = revive_records(CutStore(), "orders", read, 10_000, bodies.get)
    assert got == [ReviveRecord(1, "ck", b"r1"), ReviveRecord(2, "ck", b"r2")]
    assert [r.queue_offset for r in revive_records(Store(), "orders", read, 200,
                                                   bodies.get)] == [0, 1]
    # An unreadable record is left out.
    assert revive_records(Store(), "orders", read, 10_000,
                          {0: bodies[0]}.get) == [ReviveRecord(0, "ck", b"r0")]


def test_the_revive_finds_a_popped_message_only_at_its_offset() -> None:
    record = MessageRecord(topic="orders", body=b"m")
    def read(offset: int) -> ReadMessage:
        return ReadMessage("orders", 0, offset, "broker-a")
    assert popped_record(Store(), read(2), {200: record}.get) is record
    assert popped_record(CutStore(), read(0), {0: record}.get) is None
    assert popped_record(Store(), read(9), {0: record}.get) is None
