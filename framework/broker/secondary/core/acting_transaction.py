"""Transactions on a slave acting for its absent master (RIP-32; sans-I/O).

An acting slave must not write its own commit log, so where its master
would put something for a transaction it escapes it to another master
(through the acting escape bridge), or puts nothing:

- the check (``plan_acting_round``): the master's rounds over the slave's
  replicated half queue (``transaction_check.plan_round``), but a half
  message the master would put again (to check it, or to move past it in
  its immunity time) is ``Escape``\\ d instead: put on another master as a
  half message in its real topic (``escaped_half``), whose own check owns
  the transaction from then on. Its ledger marks it ``ESCAPED``, so an
  END_TRANSACTION for it here is refused, and the progress moves past it;
- END_TRANSACTION (``transaction.end_transaction``'s checks and decisions):
  a commit's real message goes to another master (``acting_commit``), a
  rollback puts nothing; no op record either way (its offsets would name
  another master's half queue). The acting term's ledger, in memory,
  keeps the transaction ended, so its check passes it.

A master that comes back adopts the check's progress (the consumer
offsets of ``CID_SYS_RMQ_TRANS``) at its pre-online: what the acting check
passed is not checked again, what it had not yet passed is (a commit ended
here may then be delivered twice; nothing is lost).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from triomq.broker.core.escape_bridge import EscapedMessage
from triomq.broker.secondary.core.transaction import (
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET,
    Commit,
    reset_transaction,
    transaction_key,
)
from triomq.broker.secondary.core.transaction_check import (
    CheckSettings,
    Discard,
    HalfEntry,
    Renew,
    Skip,
    plan_round,
)
from triomq.protocol.message import TRANSACTION_PREPARED, MessageRecord

__all__ = ["ActingRound", "Escape", "acting_commit", "escaped_half", "plan_acting_round"]


@attrs.frozen
class Escape:
    """Put ``message`` (the half message, as a half) on another master; the transaction
    ``key`` is then that master's to check."""

    queue_offset: int
    key: int
    message: EscapedMessage


ActingAction = Skip | Discard | Escape


@attrs.frozen
class ActingRound:
    """One acting round's actions, in queue order, and the half progress once all are
    done (a driver whose put failed stops at that entry instead)."""

    actions: tuple[ActingAction, ...]
    stop: int


def escaped_half(half: MessageRecord) -> EscapedMessage:
    """``half`` as another master stores it as its own half message: sent again in its
    real topic and queue with ``TRAN_MSG`` and sysFlag PREPARED, its producer group,
    transaction id, check count and born time kept; the key of this log's half queue
    (``TRAN_PREPARED_QUEUE_OFFSET``) dropped, that master's queue offset is its key."""
    properties = {name: value for name, value in half.properties.items()
                  if name not in (PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID,
                                  PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET)}
    properties[PROPERTY_TRANSACTION_PREPARED] = "true"
    real_queue = half.properties.get(PROPERTY_REAL_QUEUE_ID, "0")
    return EscapedMessage(
        topic=half.properties.get(PROPERTY_REAL_TOPIC, ""),
        queue_id=int(real_queue) if real_queue.isdigit() else 0,
        body=half.body, properties=properties, flag=half.flag,
        sys_flag=reset_transaction(half.sys_flag, TRANSACTION_PREPARED),
        born_timestamp=half.born_timestamp, born_host=half.born_host,
        reconsume_times=half.reconsume_times)


def acting_commit(commit: Commit) -> EscapedMessage:
    """A commit's real message as an acting slave puts it on another master: its half
    message is in no log of that master, so it names none."""
    return attrs.evolve(commit.real, prepared_transaction_offset=0)


def plan_acting_round(entries: Sequence[HalfEntry], ended: Mapping[int, str],
                      settings: CheckSettings, *, start: int, now_ms: int) -> ActingRound:
    """The master's round over ``entries`` (``plan_round``), each put of the half message
    again an ``Escape`` of it as it is (its check count is the other master's to move)."""
    plan = plan_round(entries, ended, settings, start=start, now_ms=now_ms)
    records = {entry.queue_offset: entry.record for entry in entries}
    actions: list[ActingAction] = []
    for action in plan.actions:
        if isinstance(action, Renew):
            half = records[action.queue_offset]
            assert half is not None  # plan_round skips what it cannot read
            actions.append(Escape(action.queue_offset, transaction_key(half),
                                  escaped_half(half)))
        else:
            actions.append(action)
    return ActingRound(tuple(actions), plan.stop)
