"""The acting slave's transaction rules without an event loop: the half messages it
escapes to another master, its rounds, and how a master stores an escaped half."""

from __future__ import annotations

import attrs
from test_put_flow import MASTER, SETTINGS, new_id, refused
from test_transaction_core import NOW, header, sent, stored_half

from triomq.broker.core.codes import ResponseCode
from triomq.broker.secondary.core.acting_transaction import (
    Escape,
    acting_commit,
    escaped_half,
    plan_acting_round,
)
from triomq.broker.secondary.core.transaction import (
    ESCAPED,
    HALF_TOPIC,
    Commit,
    TransactionLedger,
    end_transaction,
    real_message,
)
from triomq.broker.secondary.core.transaction_check import (
    CheckSettings,
    Discard,
    HalfEntry,
    Skip,
)
from triomq.broker.secondary.core.transaction_reads import TransactionReads
from triomq.broker.send.core.put_flow import Append, PutFlow
from triomq.protocol.message import MessageRecord

CHECKS = CheckSettings(transaction_time_out=6000, transaction_check_max=15,
                       transaction_check_interval=30000)


def test_an_escaped_half_is_sent_again_in_its_real_topic_as_a_half() -> None:
    # A check's copy: it carries the key of this log's half queue and a check count.
    copy = stored_half(9, properties={**sent().properties, "TRANSACTION_CHECK_TIMES": "2",
                                      "TRAN_PREPARED_QUEUE_OFFSET": "7"})
    message = escaped_half(copy)
    assert (message.topic, message.queue_id, message.body) == ("orders", 3, b"paid")
    assert message.sys_flag & 0xC == 4  # PREPARED
    assert message.born_timestamp == copy.born_timestamp
    assert message.properties == {"TRAN_MSG": "true", "PGROUP": "tx", "UNIQ_KEY": "ID1",
                                  "__transactionId__": "ID1", "TRANSACTION_CHECK_TIMES": "2"}

    # The receiving master's put stores it as its own half message.
    action = PutFlow(SETTINGS, now=0.0).start_own(message, MASTER, store_ms=99, new_id=new_id)
    assert isinstance(action, Append)
    (stored,) = action.records
    assert (stored.topic, stored.queue_id, stored.sys_flag & 0xC) == (HALF_TOPIC, 0, 0)
    assert {"REAL_TOPIC": "orders", "REAL_QID": "3", "PGROUP": "tx",
            "TRANSACTION_CHECK_TIMES": "2"}.items() <= stored.properties.items()
    rejecting = attrs.evolve(SETTINGS, reject_transaction_message=True)
    code, _ = refused(PutFlow(rejecting, now=0.0).start_own(message, MASTER, store_ms=99,
                                                            new_id=new_id))
    assert code == ResponseCode.NO_PERMISSION
    # A check's copy of a half, put again under the half topic, stays as it is.
    renewed = attrs.evolve(message, topic=HALF_TOPIC, queue_id=0, sys_flag=0)
    action = PutFlow(SETTINGS, now=0.0).start_own(renewed, MASTER, store_ms=99, new_id=new_id)
    assert isinstance(action, Append) and "REAL_TOPIC" not in action.records[0].properties


def test_an_acting_round_escapes_what_the_master_would_put_again() -> None:
    ended, old = stored_half(0), stored_half(1)
    tired = stored_half(2, properties={**sent().properties, "TRANSACTION_CHECK_TIMES": "15"})
    immune = stored_half(3, born_timestamp=NOW - 8000,
                         properties={**sent().properties, "CHECK_IMMUNITY_TIME_IN_SECONDS": "60"})
    young = stored_half(4, born_timestamp=NOW - 1000)
    entries = [HalfEntry(0, ended), HalfEntry(1, old), HalfEntry(2, tired),
               HalfEntry(3, immune), HalfEntry(4, young)]
    plan = plan_acting_round(entries, {0: "commit"}, CHECKS, start=0, now_ms=NOW)
    skip, check, discard, immunity = plan.actions
    assert plan.stop == 4 and skip == Skip(0) and isinstance(discard, Discard)
    # Escaped as they are: the other master's check counts its own checks.
    assert check == Escape(1, 1, escaped_half(old))
    assert "TRANSACTION_CHECK_TIMES" not in check.message.properties
    assert immunity == Escape(3, 3, escaped_half(immune))


def test_an_escaped_transaction_is_not_ended_on_the_acting_slave() -> None:
    half = stored_half()
    refusal = end_transaction(header(8), half, ended={7: ESCAPED}, now_ms=NOW,
                              transaction_time_out=6000)
    assert refusal is not None and not isinstance(refusal, Commit)
    assert refusal.code == ResponseCode.ILLEGAL_OPERATION
    assert "moved to another master's check" in refusal.remark
    commit = end_transaction(header(8), half, ended={}, now_ms=NOW, transaction_time_out=6000)
    assert isinstance(commit, Commit)
    # The other master holds no half of it: the committed message names none.
    assert acting_commit(commit).prepared_transaction_offset == 0
    assert acting_commit(commit).topic == "orders"


@attrs.frozen
class Entry:
    queue_offset: int
    physical_offset: int


class Log:
    """A log of a half message at 0 and a committed message at 100."""

    def __init__(self, committed) -> None:
        self.records = {0: stored_half(0, 0), 100: attrs.evolve(committed, physical_offset=100)}
        self.min_offset, self.max_offset = 0, 200

    def read_record(self, offset: int):
        return self.records[offset]

    def iter_records(self, start=None, end=None):
        return iter(self.records.values())

    def queue_min_offset(self, topic: str, queue_id: int) -> int:
        return 0

    def queue_max_offset(self, topic: str, queue_id: int) -> int:
        return 1 if topic == HALF_TOPIC else 0

    def queue_entries(self, topic, queue_id, start, max_count):
        if topic != HALF_TOPIC or start > 0:
            return []
        return [Entry(0, 0)]


def committed(uniq_key: str) -> MessageRecord:
    real = real_message(stored_half(0, 0), 8)
    return MessageRecord(topic=real.topic, body=real.body, queue_id=real.queue_id,
                         sys_flag=real.sys_flag, prepared_transaction_offset=0,
                         properties={**real.properties, "UNIQ_KEY": uniq_key})


def test_a_committed_message_ends_only_the_half_message_of_its_own_id() -> None:
    ledger = TransactionLedger()
    TransactionReads(Log(committed("ID1"))).catch_up(ledger, 0)
    assert ledger.ended == {0: "commit"}
    # An acting slave's escaped commit names offset 0, where another half lies.
    ledger = TransactionLedger()
    TransactionReads(Log(committed("OTHER"))).catch_up(ledger, 0)
    assert ledger.ended == {}
