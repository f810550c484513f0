"""Transactional messages: half messages and how a transaction ends (sans-I/O).

RocketMQ's two-phase send. A producer sends the message with property
``TRAN_MSG`` = ``"true"`` (and sysFlag PREPARED, 4): the put flow stores it
as a *half message* (``half_message``) under ``RMQ_SYS_TRANS_HALF_TOPIC``
queue 0, its topic and queue kept in ``REAL_TOPIC`` / ``REAL_QID`` and its
transaction bits cleared, so no consumer of the real topic sees it. A
broker with ``reject_transaction_message`` refuses it with NO_PERMISSION.

Then the producer runs its local transaction and sends END_TRANSACTION
(``EndTransactionHeader``, oneway): ``end_transaction`` decides what the
request does with the half message at ``commitLogOffset``:

- commit (8): ``Commit``, the real message (topic and queue restored,
  sysFlag COMMIT, ``TRAN_MSG``, ``REAL_TOPIC`` and ``REAL_QID`` cleared, as
  RocketMQ 5's ``EndTransactionProcessor`` does, its
  ``preparedTransactionOffset`` the half message's commit-log offset), then
  the op record;
- rollback (12): ``Rollback``, the op record only;
- unknown (0): nothing (the check service asks the producer later).

The op record (``op_message``) goes to ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue
0, tag ``d``, its body the half message's queue offset and a comma, as
RocketMQ writes it. A refusal stores nothing: SYSTEM_ERROR with RocketMQ's
remarks for an unknown offset and a producer group, queue offset or
commit-log offset that does not match; SYSTEM_ERROR naming the topic for an
offset that is not a half message; ILLEGAL_OPERATION for a half message
already ended (``TransactionLedger``: a transaction is committed or rolled
back once, never both), and for a producer's own END_TRANSACTION past a
custom ``CHECK_IMMUNITY_TIME_IN_SECONDS`` (RocketMQ's
``rejectCommitOrRollback``: the check decides it then).

A transaction is known by its *key*: the queue offset of the half message
the producer sent. The check service re-puts a half message to count its
checks (``TRANSACTION_CHECK_TIMES``); the copy carries the key in
``TRAN_PREPARED_QUEUE_OFFSET``, so ending the copy ends the original too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from triomq.broker.core.codes import ResponseCode
from triomq.broker.core.escape_bridge import EscapedMessage
from triomq.protocol.header_fields import HeaderFields
from triomq.protocol.message import (
    PROPERTY_DELAY,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    TRANSACTION_COMMIT,
    TRANSACTION_PREPARED,
    TRANSACTION_ROLLBACK,
    MessageRecord,
)
from triomq.protocol.remoting import RemotingCommand

__all__ = [
    "CHECK_MAX_TIME_TOPIC",
    "ESCAPED",
    "HALF_TOPIC",
    "OP_HALF_TOPIC",
    "TRANSACTION_GROUP",
    "Commit",
    "EndTransactionHeader",
    "Rollback",
    "TransactionLedger",
    "end_transaction",
    "half_message",
    "is_commit",
    "is_own_half",
    "is_prepared",
    "op_message",
    "op_offsets",
    "parse_end_transaction",
    "real_message",
    "reject_response",
    "transaction_key",
]

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
#: The group whose consumer offsets are the check service's progress (``MixAll``'s).
TRANSACTION_GROUP = "CID_SYS_RMQ_TRANS"
#: The op records' tag (``TransactionalMessageUtil.REMOVE_TAG``).
REMOVE_TAG = "d"
OFFSET_SEPARATOR = ","

PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_TRANSACTION_ID = "__transactionId__"
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"

#: sysFlag's transaction bits (``MessageSysFlag``).
TRANSACTION_MASK = 0xC
TRANSACTION_NOT_TYPE = 0
END_TYPES = {TRANSACTION_NOT_TYPE: "unknown", TRANSACTION_COMMIT: "commit",
             TRANSACTION_ROLLBACK: "rollback"}
#: How a ``TransactionLedger`` marks a half message a slave acting for its absent master
#: moved to another master's check (``triomq.broker.secondary.core.acting_transaction``).
ESCAPED = "escaped"


def reset_transaction(sys_flag: int, value: int) -> int:
    """``MessageSysFlag.resetTransactionValue``: ``sys_flag`` with its transaction bits
    replaced by ``value``."""
    return (sys_flag & ~TRANSACTION_MASK) | value


# -- half messages ----------------------------------------------------------------


def is_prepared(properties: Mapping[str, str], reconsume_times: int = 0) -> bool:
    """Whether a put is a half message: ``TRAN_MSG`` true (Java's parseBoolean), unless
    it is a retried message sent back with a delay level (RocketMQ's rule)."""
    prepared = properties.get(PROPERTY_TRANSACTION_PREPARED, "").lower() == "true"
    retried = reconsume_times > 0 and properties.get(PROPERTY_DELAY, "0") not in ("", "0")
    return prepared and not retried


def is_own_half(properties: Mapping[str, str], sys_flag: int) -> bool:
    """Whether a broker's own put is a half message to store as one: ``TRAN_MSG`` and
    sysFlag PREPARED, as an acting slave escapes a half message. The check's copies of
    a half message (already in the half topic) have their transaction bits cleared."""
    return (is_prepared(properties)
            and sys_flag & TRANSACTION_MASK == TRANSACTION_PREPARED)


def reject_response(broker_ip: str) -> RemotingCommand:
    """A broker with ``reject_transaction_message``'s answer to a half message."""
    return RemotingCommand.response(
        ResponseCode.NO_PERMISSION,
        remark=f"the broker[{broker_ip}] sending transaction message is forbidden")


def half_message(record: MessageRecord) -> MessageRecord:
    """The half message a prepared put stores instead of ``record``
    (``TransactionalMessageBridge.parseHalfMessageInner``)."""
    properties = dict(record.properties)
    unique_id = properties.get(PROPERTY_UNIQ_KEY)
    if unique_id:
        properties[PROPERTY_TRANSACTION_ID] = unique_id
    properties[PROPERTY_REAL_TOPIC] = record.topic
    properties[PROPERTY_REAL_QUEUE_ID] = str(record.queue_id)
    return attrs.evolve(record, topic=HALF_TOPIC, queue_id=0, properties=properties,  # type: ignore[arg-type]
                        sys_flag=reset_transaction(record.sys_flag, TRANSACTION_NOT_TYPE))


def transaction_key(half: MessageRecord) -> int:
    """The transaction's key: the queue offset of the half message its producer sent."""
    prepared = half.properties.get(PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET, "")
    return int(prepared) if prepared.isascii() and prepared.isdigit() else half.queue_offset


def real_message(half: MessageRecord, sys_flag: int) -> EscapedMessage:
    """The message a half one stands for, in its real topic and queue
    (``EndTransactionProcessor.endMessageTransaction``)."""
    properties = {name: value for name, value in half.properties.items()
                  if name not in (PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID,
                                  PROPERTY_TRANSACTION_PREPARED)}
    real_queue = half.properties.get(PROPERTY_REAL_QUEUE_ID, "0")
    return EscapedMessage(
        topic=half.properties.get(PROPERTY_REAL_TOPIC, ""),
        queue_id=int(real_queue) if real_queue.isdigit() else 0,
        body=half.body, properties=properties, flag=half.flag,
        sys_flag=reset_transaction(half.sys_flag, sys_flag),
        born_timestamp=half.born_timestamp, born_host=half.born_host,
        reconsume_times=half.reconsume_times, prepared_transaction_offset=half.physical_offset)


def is_commit(record: MessageRecord) -> bool:
    """Whether ``record`` is a committed transactional message (sysFlag COMMIT)."""
    return record.sys_flag & TRANSACTION_MASK == TRANSACTION_COMMIT


def op_message(half_queue_offset: int) -> EscapedMessage:
    """The op record that says the half message at ``half_queue_offset`` is ended."""
    return EscapedMessage(topic=OP_HALF_TOPIC, queue_id=0,
                          body=f"{half_queue_offset}{OFFSET_SEPARATOR}".encode(),
                          properties={PROPERTY_TAGS: REMOVE_TAG})


def op_offsets(op: MessageRecord) -> list[int]:
    """The half messages' queue offsets an op record names (none unless tagged ``d``)."""
    if op.properties.get(PROPERTY_TAGS) != REMOVE_TAG:
        return []
    text = op.body.decode("utf-8", "replace")
    return [int(part) for part in text.split(OFFSET_SEPARATOR)
            if part.isascii() and part.isdigit()]


def immunity_time(half: MessageRecord, transaction_time_out: int) -> int | None:
    """A custom ``CHECK_IMMUNITY_TIME_IN_SECONDS`` in ms, at least
    ``transaction_time_out`` (None when the message sets none)."""
    raw = half.properties.get(PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS)
    if raw is None:
        return None
    seconds = int(raw) if raw.isascii() and raw.isdigit() else 0
    return max(seconds * 1000, transaction_time_out)


# -- END_TRANSACTION ----------------------------------------------------------------


@attrs.frozen
class EndTransactionHeader:
    """``EndTransactionRequestHeader``'s fields."""

    producer_group: str
    tran_state_table_offset: int
    commit_log_offset: int
    commit_or_rollback: int
    from_transaction_check: bool
    msg_id: str
    transaction_id: str | None = None


def parse_end_transaction(fields: Mapping[str, str]) -> EndTransactionHeader:
    """Read END_TRANSACTION's header; ``HeaderFieldError`` names a missing or bad field."""
    header = HeaderFields(fields, "END_TRANSACTION")
    commit_or_rollback = header.integer("commitOrRollback")
    if commit_or_rollback not in END_TYPES:
        raise header.fail("commitOrRollback", f"expected 0 (unknown), 8 (commit) or 12 "
                                              f"(rollback), got {commit_or_rollback}")
    return EndTransactionHeader(
        producer_group=header.string("producerGroup"),
        tran_state_table_offset=header.integer("tranStateTableOffset"),
        commit_log_offset=header.integer("commitLogOffset"),
        commit_or_rollback=commit_or_rollback,
        from_transaction_check=header.boolean("fromTransactionCheck"),
        msg_id=header.string("msgId"),
        transaction_id=fields.get("transactionId") or None)


@attrs.frozen
class Commit:
    """Put ``real``, then ``op``; the transaction ``key`` is then committed."""

    key: int
    real: EscapedMessage
    op: EscapedMessage


@attrs.frozen
class Rollback:
    """Put ``op``; the transaction ``key`` is then rolled back."""

    key: int
    op: EscapedMessage


EndDecision = Commit | Rollback | RemotingCommand | None


def _system_error(remark: str) -> RemotingCommand:
    return RemotingCommand.response(ResponseCode.SYSTEM_ERROR, remark=remark)


def end_transaction(header: EndTransactionHeader, half: MessageRecord | None, *,
                    ended: Mapping[int, str], now_ms: int, transaction_time_out: int
                    ) -> EndDecision:
    """What END_TRANSACTION does with ``half``, the record at its ``commitLogOffset``
    (None: no record starts there). ``ended`` maps the keys of transactions ended
    (or being ended) to how. None: nothing to do (state unknown); a
    ``RemotingCommand``: the refusal."""
    if header.commit_or_rollback == TRANSACTION_NOT_TYPE:
        return None
    if half is None:
        return _system_error("Find prepared transaction message failed")
    if half.topic != HALF_TOPIC:
        return _system_error(f"the message at commitLogOffset {header.commit_log_offset} is "
                             f"not a half message (topic {half.topic[:200]})")
    immunity = immunity_time(half, transaction_time_out)
    if (not header.from_transaction_check and immunity is not None
            and now_ms - half.born_timestamp > immunity):
        return RemotingCommand.response(
            ResponseCode.ILLEGAL_OPERATION,
            remark=f"the half message's CHECK_IMMUNITY_TIME_IN_SECONDS ({immunity} ms) is "
                   f"over: its transaction is ended by a check")
    if half.properties.get(PROPERTY_PRODUCER_GROUP) != header.producer_group:
        return _system_error("The producer group wrong")
    if half.queue_offset != header.tran_state_table_offset:
        return _system_error("The transaction state table offset wrong")
    if half.physical_offset != header.commit_log_offset:
        return _system_error("The commit log offset wrong")
    key = transaction_key(half)
    how = ended.get(key)
    if how == ESCAPED:
        return RemotingCommand.response(
            ResponseCode.ILLEGAL_OPERATION,
            remark=f"the transaction of half message {key} moved to another master's "
                   f"check while this slave acted for its master: that check ends it")
    if how is not None:
        return RemotingCommand.response(
            ResponseCode.ILLEGAL_OPERATION,
            remark=f"the transaction of half message {key} is already ended ({how}): "
                   f"it is committed or rolled back once")
    op = op_message(half.queue_offset)
    if header.commit_or_rollback == TRANSACTION_COMMIT:
        return Commit(key, real_message(half, TRANSACTION_COMMIT), op)
    return Rollback(key, op)


class TransactionLedger:
    """The transactions a master has ended, by key, as its op records say.

    Built from the op queue's first record up in each master term (the op
    records are in the log every replica holds), then kept current: a
    request marks its key ``begin`` before its puts, so two requests for one
    transaction cannot both end it, and ``abandon`` when nothing was stored.
    A commit whose op record an earlier master did not store is found by its
    committed message (``read_commit``): a new term reads the log's
    committed messages from the oldest open transaction's half message on.
    """

    def __init__(self) -> None:
        #: How each ended transaction ended ("commit", "rollback", "ended": an op
        #: record read back, which does not say).
        self.ended: dict[int, str] = {}
        #: The op queue offset to read next.
        self.op_read = 0
        #: Whether the committed messages of the open transactions were read.
        self.commits_read = False

    def read_op(self, op_queue_offset: int, keys: Iterable[int]) -> None:
        """The op record at ``op_queue_offset`` ended the transactions ``keys``."""
        for key in keys:
            self.ended.setdefault(key, "ended")
        self.op_read = max(self.op_read, op_queue_offset + 1)

    def read_commit(self, half: MessageRecord) -> None:
        """A committed message in the log names ``half`` as its half message."""
        self.ended.setdefault(transaction_key(half), "commit")

    def begin(self, key: int, how: str) -> None:
        self.ended[key] = how

    def abandon(self, key: int) -> None:
        """The request's first put failed: nothing was stored, the key is open again."""
        self.ended.pop(key, None)
