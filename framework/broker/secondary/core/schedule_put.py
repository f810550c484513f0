"""Where a delayed put is stored (sans-I/O): RocketMQ's ``HookUtils.handleScheduleMessage``.

A message whose ``DELAY`` property is a level above 0, and that is not a
transaction's half or rollback (its sysFlag's transaction type is NOT or
COMMIT), is stored under ``SCHEDULE_TOPIC_XXXX``, queue ``level - 1``, with
``REAL_TOPIC`` and ``REAL_QID`` naming where it goes when it is due (the
schedule service, ``triomq.broker.secondary.core.schedule``, puts it there). A level
above the highest of ``message_delay_level`` is the highest, and the
stored ``DELAY`` says so; a level of 0 or below is no delay: the message is
stored as it came. Its timer properties (``TIMER_DELIVER_MS``,
``TIMER_DELAY_SEC``, ``TIMER_DELAY_MS``) go, as RocketMQ drops them when a
level is set.

Refused, nothing stored:

- a ``DELAY`` that is not an integer: MESSAGE_ILLEGAL (RocketMQ's
  ``Integer.parseInt`` fails the put);
- a timer message (a timer property and no level): SYSTEM_ERROR, as
  RocketMQ 5 answers with ``timerWheelEnable`` off: timer messages are not
  built;
- a batch carrying a delay level above 0 or a timer property:
  MESSAGE_ILLEGAL (RocketMQ's ``CommitLog.asyncPutMessages`` refuses a
  delayed batch).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from triomq.broker.core.codes import ResponseCode
from triomq.protocol.delay_levels import (
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    SCHEDULE_TOPIC,
    delay_level_of,
)
from triomq.protocol.message import (
    PROPERTY_DELAY,
    TRANSACTION_COMMIT,
    TRANSACTION_ROLLBACK,
)
from triomq.protocol.remoting import RemotingCommand

__all__ = ["TIMER_PROPERTIES", "TIMER_TOPIC", "Routed", "check_batch", "route_put"]

#: RocketMQ 5's timer-message properties, and the topic its timer wheel rolls them in.
TIMER_PROPERTIES = ("TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS")
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
TIMER_TOPIC = "rmq_sys_wheel_timer"


@attrs.frozen
class Routed:
    """Where a message is stored and the properties it is stored with."""

    topic: str
    queue_id: int
    properties: Mapping[str, str]


def _illegal_delay(properties: Mapping[str, str]) -> RemotingCommand:
    return RemotingCommand.response(
        ResponseCode.MESSAGE_ILLEGAL,
        remark=f"property {PROPERTY_DELAY} must be an integer delay level, got "
               f"{properties[PROPERTY_DELAY][:80]!r}")


def _timer_refused() -> RemotingCommand:
    return RemotingCommand.response(
        ResponseCode.SYSTEM_ERROR,
        remark="accurate timer message is not enabled, timerWheelEnable is false")


def route_put(topic: str, queue_id: int, properties: Mapping[str, str], sys_flag: int, *,
              max_delay_level: int) -> Routed | RemotingCommand:
    """Where one message with these fields is stored, or the put's refusal."""
    level = delay_level_of(properties)
    if level is None:
        return _illegal_delay(properties)
    if sys_flag & TRANSACTION_ROLLBACK not in (0, TRANSACTION_COMMIT):
        return Routed(topic, queue_id, properties)
    if level <= 0:
        if (topic != TIMER_TOPIC and PROPERTY_TIMER_OUT_MS not in properties
                and any(name in properties for name in TIMER_PROPERTIES)):
            return _timer_refused()
        return Routed(topic, queue_id, properties)
    level = min(level, max_delay_level)
    stored = {name: value for name, value in properties.items()
              if name not in TIMER_PROPERTIES}
    stored.update({PROPERTY_DELAY: str(level), PROPERTY_REAL_TOPIC: topic,
                   PROPERTY_REAL_QUEUE_ID: str(queue_id)})
    return Routed(SCHEDULE_TOPIC, level - 1, stored)


def check_batch(properties: Iterable[Mapping[str, str]]) -> RemotingCommand | None:
    """A batch's refusal when one of its messages (``properties``: each one's, the
    header's merged in) is delayed or a timer message, else None."""
    for props in properties:
        level = delay_level_of(props)
        if level is None:
            return _illegal_delay(props)
        if level > 0:
            return RemotingCommand.response(
                ResponseCode.MESSAGE_ILLEGAL,
                remark=f"a batch cannot carry delayed messages ({PROPERTY_DELAY} {level})")
        if any(name in props for name in TIMER_PROPERTIES):
            return _timer_refused()
    return None
