"""The transaction check: asking producers how their open transactions ended (sans-I/O).

RocketMQ's ``TransactionalMessageCheckService``. Every
``transaction_check_interval`` a master scans its half messages from the
check's progress (the consumer offset of group ``CID_SYS_RMQ_TRANS`` on
``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0, kept in consumerOffset.json so a new
master goes on where the last stopped). ``plan_round`` gets the entries
read from there, the ended transactions (``TransactionLedger.ended``, kept
current from the op records) and ``now``, and says what to do with each,
in queue order:

- ``Skip``: ended, or no longer readable;
- ``Discard``: checked ``transaction_check_max`` times already: moved into
  ``TRANS_CHECK_MAX_TIME_TOPIC`` (``DefaultTransactionalMessageCheckListener``);
- ``Renew`` with ``check``: older than ``transaction_time_out`` (or its
  ``CHECK_IMMUNITY_TIME_IN_SECONDS``) and still open: put again with
  ``TRANSACTION_CHECK_TIMES`` one more (the count lives in the log, as in
  RocketMQ), then CHECK_TRANSACTION_STATE (``check_request``, for the copy)
  to a connection of its producer group;
- ``Renew`` without ``check``: younger than its own immunity time: put
  again so the scan moves on past it (RocketMQ's immunity copy).

The scan stops at a half message too young to check: the ones behind it
are younger. (RocketMQ also stops at one stored after the round began;
here a round plans over the entries read before it, and another master's
store times are of another clock.) ``CheckRound.stop`` is where
the progress goes once every action is done; a driver whose put failed
stops at that entry instead. The op queue's progress (same group, on
``RMQ_SYS_TRANS_OP_HALF_TOPIC``) moves past the op records that only name
half messages behind the half progress (``op_progress``).

Every copy carries the transaction's key in ``TRAN_PREPARED_QUEUE_OFFSET``
(``triomq.broker.secondary.core.transaction``): ending any copy ends the transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from triomq.broker.core.escape_bridge import EscapedMessage
from triomq.broker.core.headers import offset_msg_id
from triomq.broker.secondary.core.transaction import (
    CHECK_MAX_TIME_TOPIC,
    HALF_TOPIC,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRANSACTION_CHECK_TIMES,
    PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET,
    immunity_time,
    transaction_key,
)
from triomq.protocol.message import PROPERTY_UNIQ_KEY, MessageRecord, encode

__all__ = ["CheckRequest", "CheckRound", "CheckSettings", "Discard", "HalfEntry", "Renew",
           "Skip", "check_request", "check_times", "op_progress", "plan_round"]

#: Half messages one round looks at at most (the next round goes on from there).
MAX_SCAN = 1024


@attrs.frozen
class CheckSettings:
    """The broker's settings the check reads (``BrokerConfig``'s names; ms)."""

    transaction_time_out: int = 6000
    transaction_check_max: int = 15
    transaction_check_interval: int = 30000


@attrs.frozen
class HalfEntry:
    """The half queue's entry at ``queue_offset``: its record (None: not readable)."""

    queue_offset: int
    record: MessageRecord | None


@attrs.frozen
class Skip:
    queue_offset: int


@attrs.frozen
class Discard:
    """Put ``message`` (into TRANS_CHECK_MAX_TIME_TOPIC): the half message is given up."""

    queue_offset: int
    message: EscapedMessage


@attrs.frozen
class Renew:
    """Put ``message`` (the half message again); with ``check``, then ask its
    producer ``group`` about the copy."""

    queue_offset: int
    message: EscapedMessage
    check: bool
    group: str


CheckAction = Skip | Discard | Renew


@attrs.frozen
class CheckRound:
    """One round's actions, in queue order, and the half progress once all are done."""

    actions: tuple[CheckAction, ...]
    stop: int


def check_times(half: MessageRecord) -> int:
    """How often the half message was checked (``TRANSACTION_CHECK_TIMES``)."""
    raw = half.properties.get(PROPERTY_TRANSACTION_CHECK_TIMES, "")
    return int(raw) if raw.isascii() and raw.isdigit() else 0


def _copy(half: MessageRecord, topic: str, properties: Mapping[str, str]) -> EscapedMessage:
    return EscapedMessage(topic=topic, queue_id=0, body=half.body, properties=properties,
                          flag=half.flag, sys_flag=half.sys_flag,
                          born_timestamp=half.born_timestamp, born_host=half.born_host,
                          reconsume_times=half.reconsume_times)


def _renewed(half: MessageRecord, times: int | None) -> EscapedMessage:
    """The half message put again: its check count ``times`` (None: as it is)."""
    properties = {**half.properties,
                  PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET: str(transaction_key(half))}
    if times is not None:
        properties[PROPERTY_TRANSACTION_CHECK_TIMES] = str(times)
    return _copy(half, HALF_TOPIC, properties)


def plan_round(entries: Sequence[HalfEntry], ended: Mapping[int, str], settings: CheckSettings,
               *, start: int, now_ms: int) -> CheckRound:
    """The round over ``entries`` (consecutive half queue entries from ``start``)."""
    actions: list[CheckAction] = []
    stop = start
    for entry in entries[:MAX_SCAN]:
        half = entry.record
        if half is None or transaction_key(half) in ended:
            actions.append(Skip(entry.queue_offset))
        else:
            action = _open_half(entry.queue_offset, half, settings, now_ms)
            if action is None:
                break
            actions.append(action)
        stop = entry.queue_offset + 1
    return CheckRound(tuple(actions), stop)


def _open_half(queue_offset: int, half: MessageRecord, settings: CheckSettings,
               now_ms: int) -> CheckAction | None:
    times = check_times(half)
    group = half.properties.get(PROPERTY_PRODUCER_GROUP, "")
    if times >= settings.transaction_check_max:
        return Discard(queue_offset, _copy(half, CHECK_MAX_TIME_TOPIC, half.properties))
    age = now_ms - half.born_timestamp
    immunity = immunity_time(half, settings.transaction_time_out)
    if immunity is not None and 0 <= age < immunity:
        return Renew(queue_offset, _renewed(half, None), check=False, group=group)
    if 0 <= age < settings.transaction_time_out:
        return None  # newly arrived: the ones behind are younger still
    # A born time ahead of the broker's clock is checked at once, as RocketMQ does.
    return Renew(queue_offset, _renewed(half, times + 1), check=True, group=group)


def op_progress(start: int, ops: Sequence[Sequence[int]], half_progress: int) -> int:
    """The op queue's progress: past the op records from ``start`` (each given as the
    half queue offsets it names) that name only half messages behind ``half_progress``."""
    progress = start
    for offsets in ops:
        if any(offset >= half_progress for offset in offsets):
            break
        progress += 1
    return progress


@attrs.frozen
class CheckRequest:
    """CHECK_TRANSACTION_STATE (oneway) to a connection of producer ``group``."""

    group: str
    fields: dict[str, str]
    body: bytes


def check_request(copy: MessageRecord, broker_name: str) -> CheckRequest:
    """The check of ``copy`` (a half message as stored): ``CheckTransactionStateRequestHeader``
    for it, and the message in its real topic and queue as the body."""
    unique_id = copy.properties.get(PROPERTY_UNIQ_KEY, "")
    store_id = offset_msg_id(copy.store_host, copy.physical_offset)
    fields = {"topic": copy.topic, "tranStateTableOffset": str(copy.queue_offset),
              "commitLogOffset": str(copy.physical_offset), "offsetMsgId": store_id,
              "msgId": unique_id or store_id, "transactionId": unique_id or store_id,
              "bname": broker_name}
    real_queue = copy.properties.get(PROPERTY_REAL_QUEUE_ID, "0")
    real = attrs.evolve(copy, topic=copy.properties.get(PROPERTY_REAL_TOPIC, copy.topic),
                        queue_id=int(real_queue) if real_queue.isdigit() else 0)
    return CheckRequest(copy.properties.get(PROPERTY_PRODUCER_GROUP, ""), fields, encode(real))
