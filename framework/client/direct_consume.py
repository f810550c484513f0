"""A push consumer's answer to CONSUME_MESSAGE_DIRECTLY: ``ConsumeMessageDirectlyResult``.

``mqadmin queryMsgById -i ID -g G -d CLIENT`` has one consumer consume one
stored message again: the broker that stores it passes the request on to
the client (header ``consumerGroup``, ``clientId``, ``msgId`` and the
broker's ``brokerName``) with the stored record as the body. As RocketMQ's
Java push consumer does, the consumer of the group decodes the record,
calls its listener once with it (a record of the group's retry topic under
its first topic, a concurrent listener with its call's context), touches
no offset, and answers with the body fastjson writes for the result::

    {"autoCommit":true,"consumeResult":"CR_SUCCESS","order":false,"spentTimeMills":3}

- ``order``: whether the listener is an orderly one;
- ``autoCommit``: true (triomq's orderly listeners have no context to
  turn it off, as a Java one's default);
- ``consumeResult``: the listener's answer as a ``CMResult``; None for the
  answer of a listener that returned nothing (``CR_RETURN_NULL``),
  ``CR_THROW_EXCEPTION`` with the exception and where it was raised as the
  ``remark`` (left out otherwise, as fastjson leaves out nulls);
- ``spentTimeMills``: how long the listener took, in ms.

A consumer asked for another group, or one that is not a push consumer,
answers SYSTEM_ERROR ``The Consumer Group <G> not exist in this consumer``,
as RocketMQ's client does when it holds no push consumer of the group.
"""

from __future__ import annotations

import enum
import logging
import os
import traceback

import attrs
import trio

from triomq.client.core.codes import ResponseCode as Code
from triomq.client.core.consume_retry import reset_retry_topic
from triomq.client.core.listener import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyStatus,
    MessageListener,
    MessageListenerOrderly,
    listener_context,
)
from triomq.client.core.message import MessageDecodeError, decode_messages
from triomq.client.core.running_info import group_not_here
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.route import dumps

__all__ = ["CMResult", "DirectResult", "consume_directly", "exception_desc", "not_consumed_here"]

log = logging.getLogger("triomq.client")


class CMResult(enum.Enum):
    """A listener's answer as the result says it (RocketMQ's ``CMResult``)."""

    CR_SUCCESS = "CR_SUCCESS"
    CR_LATER = "CR_LATER"
    CR_ROLLBACK = "CR_ROLLBACK"
    CR_COMMIT = "CR_COMMIT"
    CR_THROW_EXCEPTION = "CR_THROW_EXCEPTION"
    CR_RETURN_NULL = "CR_RETURN_NULL"


# RocketMQ's orderly ROLLBACK and COMMIT (CR_ROLLBACK, CR_COMMIT) are deprecated
# statuses triomq's orderly listeners do not have.
_RESULTS: dict[object, CMResult] = {
    ConsumeConcurrentlyStatus.CONSUME_SUCCESS: CMResult.CR_SUCCESS,
    ConsumeConcurrentlyStatus.RECONSUME_LATER: CMResult.CR_LATER,
    ConsumeOrderlyStatus.SUCCESS: CMResult.CR_SUCCESS,
    ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT: CMResult.CR_LATER,
}


@attrs.frozen
class DirectResult:
    """RocketMQ's ``ConsumeMessageDirectlyResult``."""

    order: bool
    #: None: the listener answered something that is not a status (the Java client
    #: leaves the field null then).
    consume_result: CMResult | None
    spent_ms: int
    auto_commit: bool = True
    remark: str | None = None

    def to_json(self) -> bytes:
        """The body fastjson writes: fields in name order, nulls left out."""
        fields: dict[str, object] = {"autoCommit": self.auto_commit, "order": self.order,
                                     "spentTimeMills": self.spent_ms}
        if self.consume_result is not None:
            fields["consumeResult"] = self.consume_result.value
        if self.remark is not None:
            fields["remark"] = self.remark
        return dumps(fields)


def exception_desc(exc: BaseException) -> str:
    """RocketMQ's ``UtilAll.exceptionSimpleDesc`` of a Python exception: the exception,
    and the innermost frame of its traceback (the Java stack trace's first element)."""
    kind = type(exc)
    name = kind.__qualname__ if kind.__module__ == "builtins" else (
        f"{kind.__module__}.{kind.__qualname__}")
    text = f"{name}: {exc}" if str(exc) else name
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        where = frames[-1]
        text += f", {where.name}({os.path.basename(where.filename)}:{where.lineno})"
    return text


def not_consumed_here(request: RemotingCommand) -> RemotingCommand:
    """The answer of a client with no push consumer of the request's group."""
    return RemotingCommand.response(
        Code.SYSTEM_ERROR, remark=group_not_here(request.ext_fields.get("consumerGroup", "")))


async def consume_directly(group: str, listener: MessageListener,
                           request: RemotingCommand) -> RemotingCommand:
    """The answer of push consumer ``group``, whose listener is ``listener``, to
    CONSUME_MESSAGE_DIRECTLY ``request`` (see the module)."""
    if request.ext_fields.get("consumerGroup", "") != group:
        return not_consumed_here(request)
    try:
        messages = decode_messages(request.body, request.ext_fields.get("brokerName", ""))
    except MessageDecodeError as exc:
        return RemotingCommand.response(Code.SYSTEM_ERROR,
                                        remark=f"the message does not decode: {exc}")
    if len(messages) != 1:
        # The Java client fails to decode anything but one record, and answers so.
        return RemotingCommand.response(
            Code.SYSTEM_ERROR, remark=f"the body holds {len(messages)} messages, not one")
    messages = [reset_retry_topic(messages[0], group)]
    order = isinstance(listener, MessageListenerOrderly)
    remark = None
    began = trio.current_time()
    try:
        with listener_context(ConsumeConcurrentlyContext(messages[0].message_queue)):
            status = await listener.consume(messages)
    except Exception as exc:
        log.warning("listener of %s raised on %s, consumed directly", group,
                    messages[0].msg_id, exc_info=True)
        result: CMResult | None = CMResult.CR_THROW_EXCEPTION
        remark = exception_desc(exc)
    else:
        result = CMResult.CR_RETURN_NULL if status is None else _RESULTS.get(status)
    spent_ms = round((trio.current_time() - began) * 1000)
    return RemotingCommand.response(
        body=DirectResult(order, result, spent_ms, remark=remark).to_json())
