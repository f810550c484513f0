"""The admin views of pending messages, pure: which delayed, timer, half and popped
messages a broker still holds for delivery, by the delivering services' own rules."""

from __future__ import annotations

from triomq.broker.admin.core.pending import (
    delayed_level,
    pending_halves,
    pending_pops,
    pending_timers,
    popped_by_queue,
)
from triomq.broker.consume.core.pull_lookup import ConfirmedEntries
from triomq.broker.pop.core.checkpoint import AckMsg, CheckPoint
from triomq.broker.pop.core.revive import REVIVE_MARGIN_MS, ReviveRecord
from triomq.broker.secondary.core.timer_checkpoint import TimerCheckpoint
from triomq.broker.secondary.core.transaction import TransactionLedger
from triomq.broker.secondary.core.transaction_check import HalfEntry
from triomq.protocol.message import MessageRecord

NOW = 1_700_000_000_000
HOST = ("10.0.0.1", 10911)


def waiting(topic: str, offset: int, physical: int, **properties: str) -> MessageRecord:
    return MessageRecord(topic=topic, body=b"m", queue_id=0, queue_offset=offset,
                         physical_offset=physical, store_host=HOST, store_timestamp=NOW,
                         born_timestamp=NOW - 9000,
                         properties={"REAL_TOPIC": "orders", "REAL_QID": "3",
                                     "UNIQ_KEY": f"U{offset}", **properties})


def test_a_levels_backlog_is_from_its_delivery_offset_to_its_queues_end() -> None:
    records = {100 * n: waiting("SCHEDULE_TOPIC_XXXX", n, 100 * n, DELAY="2") for n in range(6)}
    # Delivered up to 2; the queue holds 0..5; two listed (max_num), due at their tags code.
    found = ConfirmedEntries([(2, 200, 90, NOW + 5000), (3, 300, 90, NOW + 6000)], 0, 6)
    level = delayed_level(2, 2, found, records.get)
    assert (level.level, level.delivery_offset, level.max_offset, level.count) == (2, 2, 6, 4)
    first, second = level.messages
    assert (first.queue_offset, first.deliver_ms, first.topic, first.queue_id, first.msg_id) == (
        2, NOW + 5000, "orders", 3, "U2")
    assert first.offset_msg_id == "0A00000100002A9F00000000000000C8"
    assert second.to_json()["deliverTimeMs"] == NOW + 6000
    # An offset below a queue cut short counts from its first entry; nothing is negative.
    assert delayed_level(1, 0, ConfirmedEntries([], 4, 6), records.get).count == 2
    assert delayed_level(1, 9, ConfirmedEntries([], 0, 6), records.get).count == 0


def test_timer_messages_pending_are_those_the_checkpoint_does_not_call_delivered() -> None:
    def timer(offset: int, out: int, **more: str) -> MessageRecord:
        return waiting("rmq_sys_wheel_timer", offset, offset, TIMER_OUT_MS=str(out), **more)

    records = {0: timer(0, NOW - 2000), 1: timer(1, NOW + 1000), 2: timer(2, NOW - 3000),
               3: waiting("rmq_sys_wheel_timer", 3, 3, TIMER_OUT_MS="x"),
               5: timer(5, NOW + 4000)}
    # Scanned up to 3, every slot before NOW read: 0 and 2 are delivered, 1 is not
    # due yet, 3 cannot be delivered (the wheel skips it), 4 is gone, 5 not scanned.
    checkpoint = TimerCheckpoint(queue_offset=0, scan_offset=3, read_time_ms=NOW)
    entries = [(n, n, 10, 0) for n in range(6)]
    backlog = pending_timers(checkpoint, 1000, entries, records.get, max_num=1)
    assert backlog.count == 2
    (listed,) = backlog.messages
    assert (listed.queue_offset, listed.deliver_ms, listed.topic) == (1, NOW + 1000, "orders")
    assert backlog.to_json()["scanOffset"] == 3
    # Before any delivery every entry with a time and a real topic is pending.
    assert pending_timers(TimerCheckpoint(), 1000, entries, records.get, 9).count == 4


def half(offset: int, **properties: str) -> HalfEntry:
    record = waiting("RMQ_SYS_TRANS_HALF_TOPIC", offset, 1000 + offset,
                     PGROUP="pg", __transactionId__=f"T{offset}", **properties)
    return HalfEntry(offset, record)


def test_open_transactions_are_the_half_messages_no_op_record_ended_one_per_key() -> None:
    ledger = TransactionLedger()
    ledger.read_op(0, [1])  # the transaction of half message 1 was ended
    # 0 was checked twice: its copies at 3 and 4 carry its key.
    entries = [half(0), half(1), half(2), HalfEntry(5, None),
               half(3, TRAN_PREPARED_QUEUE_OFFSET="0", TRANSACTION_CHECK_TIMES="1"),
               half(4, TRAN_PREPARED_QUEUE_OFFSET="0", TRANSACTION_CHECK_TIMES="2")]
    backlog = pending_halves(entries, ledger.ended, progress=0, now_ms=NOW, max_num=9)
    assert backlog.count == 2
    first, second = backlog.messages
    assert (first.transaction_key, first.queue_offset, first.check_times) == (0, 4, 2)
    assert (first.producer_group, first.topic, first.transaction_id) == ("pg", "orders", "T4")
    assert (first.age_ms, first.msg_id) == (9000, "U4")
    assert (second.transaction_key, second.check_times) == (2, 0)
    assert pending_halves(entries, {0: "commit", 2: "rollback", 1: "ended"}, progress=0,
                          now_ms=NOW, max_num=9).count == 0
    listed = pending_halves(entries, ledger.ended, progress=0, now_ms=NOW, max_num=1)
    assert (listed.count, len(listed.messages)) == (2, 1)


def test_popped_messages_pending_are_the_checkpoints_offsets_no_ack_names() -> None:
    ck = CheckPoint(topic="orders", group="cg", queue_id=1, start_offset=10, pop_time=NOW,
                    invisible_time=5000, broker_name="broker-a", offset_diffs=[0, 1, 2])
    old = CheckPoint(topic="orders", group="cg", queue_id=2, start_offset=0, pop_time=NOW - 9000,
                     invisible_time=1000, broker_name="", offset_diffs=[0])
    acked = CheckPoint(topic="other", group="cg", queue_id=0, start_offset=0, pop_time=NOW,
                       invisible_time=5000, broker_name="broker-a", offset_diffs=[4])

    def ack(at: int, of: CheckPoint, offset: int) -> ReviveRecord:
        return ReviveRecord(at, "ack", AckMsg(of.topic, of.group, of.queue_id, of.start_offset,
                                              of.pop_time, "broker-a", [offset]).encode())

    records = [ReviveRecord(5, "ck", ck.encode()), ReviveRecord(6, "ck", old.encode()),
               ReviveRecord(7, "ck", acked.encode()), ack(8, ck, 11), ack(9, acked, 4),
               ReviveRecord(10, "zz", b"{}")]
    found = pending_pops(3, 4, records, broker_name="broker-a", now_ms=NOW)
    assert [(p.topic, p.queue_id, p.offsets, p.revive_offset) for p in found] == [
        ("orders", 1, (10, 12), 5), ("orders", 2, (0,), 6)]
    fresh, due = found
    assert (fresh.invisible_until, fresh.due, fresh.revive_queue_id) == (NOW + 5000, False, 3)
    # A checkpoint without its broker's name is this broker's; past its time it is due.
    assert (due.broker_name, due.due) == ("broker-a", True)
    assert pending_pops(3, 4, records, broker_name="broker-a",
                        now_ms=NOW + 5000 + REVIVE_MARGIN_MS)[0].due
    assert popped_by_queue(found + found) == [
        {"group": "cg", "topic": "orders", "queueId": 1, "count": 4},
        {"group": "cg", "topic": "orders", "queueId": 2, "count": 2}]
    assert fresh.to_json()["offsets"] == [10, 12]
