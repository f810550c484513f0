"""A transactional send's rules, as RocketMQ's ``TransactionMQProducer`` follows them (pure).

``half_message``: the message a transaction sends first, with ``TRAN_MSG``
= ``"true"`` and the producer group in ``PGROUP`` (its delay level is
dropped: a half message is never delayed); its send header carries sysFlag
PREPARED (``PREPARED_SYS_FLAG``). ``local_state``: what a half send's
status leaves to do (SEND_OK runs the local transaction; a flush or
replication timeout rolls back). ``end_fields``: END_TRANSACTION's header
after the local transaction (``EndTransactionRequestHeader``: the half
message's queue offset as ``tranStateTableOffset``, its commit-log offset
read from its offset message id), ``check_end_fields`` the one that
answers a broker's CHECK_TRANSACTION_STATE (``fromTransactionCheck``).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Awaitable, Mapping
from typing import Protocol

import attrs

from triomq.client.core.message import (
    PROPERTY_UNIQ_KEY,
    Message,
    MessageExt,
    SendResult,
    SendStatus,
)

__all__ = ["PREPARED_SYS_FLAG", "LocalTransactionState", "TransactionListener",
           "TransactionSendResult", "check_end_fields", "end_fields", "half_message",
           "local_state"]

PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
#: ``MessageSysFlag.TRANSACTION_PREPARED_TYPE``.
PREPARED_SYS_FLAG = 0x4


class LocalTransactionState(enum.Enum):
    """How a local transaction ended (RocketMQ's names), and the commitOrRollback
    value END_TRANSACTION carries for it."""

    COMMIT_MESSAGE = 8
    ROLLBACK_MESSAGE = 12
    UNKNOW = 0


class TransactionListener(Protocol):
    """Runs a half message's local transaction, and says later how it ended.

    Either method may be a coroutine function. An exception is ``UNKNOW``:
    the broker checks again later.
    """

    def execute_local_transaction(self, message: Message, arg: object
                                  ) -> LocalTransactionState | Awaitable[LocalTransactionState]:
        ...

    def check_local_transaction(self, message: MessageExt
                                ) -> LocalTransactionState | Awaitable[LocalTransactionState]:
        ...


@attrs.frozen
class TransactionSendResult:
    """A transactional send: where its half message went and how its transaction ended."""

    send_result: SendResult
    local_transaction_state: LocalTransactionState
    transaction_id: str


def half_message(message: Message, group: str) -> Message:
    """``message`` as a transaction sends it first."""
    return attrs.evolve(message, delay_time_level=0, properties={  # type: ignore[arg-type]
        **message.properties, PROPERTY_TRANSACTION_PREPARED: "true",
        PROPERTY_PRODUCER_GROUP: group})


def local_state(result: SendResult) -> LocalTransactionState | None:
    """What a half send's status decides: None (SEND_OK: run the local transaction),
    else ROLLBACK_MESSAGE (stored, but not flushed or replicated in time)."""
    return None if result.send_status is SendStatus.SEND_OK else \
        LocalTransactionState.ROLLBACK_MESSAGE


def _commit_log_offset(offset_msg_id: str) -> int:
    """The commit-log offset in an offset message id (its last 8 bytes)."""
    raw = bytes.fromhex(offset_msg_id)
    return int(struct.unpack(">q", raw[-8:])[0])


def end_fields(result: SendResult, state: LocalTransactionState, group: str) -> dict[str, str]:
    """END_TRANSACTION's header after the producer's own local transaction."""
    return {"topic": result.message_queue.topic, "producerGroup": group,
            "tranStateTableOffset": str(result.queue_offset),
            "commitLogOffset": str(_commit_log_offset(result.offset_msg_id)),
            "commitOrRollback": str(state.value), "fromTransactionCheck": "false",
            "msgId": result.msg_id, "transactionId": result.msg_id,
            "bname": result.message_queue.broker_name}


def check_end_fields(check: Mapping[str, str], message: MessageExt,
                     state: LocalTransactionState, group: str) -> dict[str, str]:
    """END_TRANSACTION's header answering the check ``check`` (its header) of ``message``."""
    unique_id = message.properties.get(PROPERTY_UNIQ_KEY) or message.msg_id
    fields = {"topic": message.topic, "producerGroup": group,
              "tranStateTableOffset": check.get("tranStateTableOffset", ""),
              "commitLogOffset": check.get("commitLogOffset", ""),
              "commitOrRollback": str(state.value), "fromTransactionCheck": "true",
              "msgId": unique_id, "transactionId": check.get("transactionId") or unique_id}
    if check.get("bname"):
        fields["bname"] = check["bname"]
    return fields
