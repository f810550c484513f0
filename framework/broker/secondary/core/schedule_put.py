"""Where a delayed or timer put is stored (sans-I/O): RocketMQ's ``handleScheduleMessage``.

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

A timer message (RocketMQ 5: a timer property, no level, not already in
``rmq_sys_wheel_timer`` and no ``TIMER_OUT_MS``, which a timer delivery
carries) is delivered at ``TIMER_DELAY_SEC`` seconds after now, else
``TIMER_DELAY_MS`` ms after now, else at ``TIMER_DELIVER_MS`` (epoch ms),
in that order, as RocketMQ's ``transformTimerMessage``. A time already
past (or now) is no delay: the message is stored as it came, at once
consumable; a client's send may be up to ``timer_precision_ms`` late (its
clock behind the broker's, the send on its way), not more (below). A time
ahead is stored under ``rmq_sys_wheel_timer`` queue 0 with ``REAL_TOPIC``,
``REAL_QID`` and ``TIMER_OUT_MS``: the time rounded down to
``timer_precision_ms`` (a time on the precision, one precision less), the
start of the wheel slot the timer service
(``triomq.broker.secondary.core.timer_wheel``) puts it back from once that
slot has passed, so at or after its time and less than one precision
after it.

Refused, nothing stored:

- a ``DELAY`` that is not an integer: MESSAGE_ILLEGAL (RocketMQ's
  ``Integer.parseInt`` fails the put);
- with ``timer_wheel_enable`` off, a timer message: SYSTEM_ERROR, RocketMQ's
  WHEEL_TIMER_NOT_ENABLE answer;
- a timer property that is not an integer, or a time further ahead than
  ``timer_max_delay_sec``: MESSAGE_ILLEGAL (RocketMQ's
  WHEEL_TIMER_MSG_ILLEGAL), the remark naming the property and its value;
- in a client's send, a negative ``TIMER_DELAY_SEC`` or ``TIMER_DELAY_MS``,
  or a ``TIMER_DELIVER_MS`` more than ``timer_precision_ms`` before the
  broker's clock: MESSAGE_ILLEGAL naming the property (RocketMQ stores
  either and delivers it at once). The broker's own puts (a transaction's
  commit, whose time may have passed while it was open) are not refused:
  a time past is due at once;
- a timer deletion (``TIMER_DEL_UNIQKEY``): MESSAGE_ILLEGAL, not built;
- a batch carrying a delay level above 0 or a timer property:
  MESSAGE_ILLEGAL (RocketMQ's ``CommitLog.asyncPutMessages`` refuses a
  delayed batch; its hook would move a timer batch's header alone, so
  triomq refuses that too).
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

__all__ = ["PROPERTY_TIMER_OUT_MS", "TIMER_PROPERTIES", "TIMER_TOPIC", "Routed",
           "TimerSettings", "check_batch", "is_timer_message", "route_put"]

#: RocketMQ 5's timer-message properties, in the order the first present wins.
TIMER_PROPERTIES = ("TIMER_DELAY_SEC", "TIMER_DELAY_MS", "TIMER_DELIVER_MS")
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
PROPERTY_TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
TIMER_TOPIC = "rmq_sys_wheel_timer"
_MAX_LONG = 2**63 - 1


@attrs.frozen
class TimerSettings:
    """The broker's timer-message settings (RocketMQ 5's defaults)."""

    #: timerWheelEnable: off, a timer message is refused.
    enable: bool = True
    #: timerMaxDelaySec: the furthest ahead a delivery time may be.
    max_delay_sec: int = 3 * 24 * 3600
    #: timerPrecisionMs: a wheel slot's length.
    precision_ms: int = 1000


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


def _timer_illegal(remark: str) -> RemotingCommand:
    return RemotingCommand.response(ResponseCode.MESSAGE_ILLEGAL,
                                    remark=f"timer message illegal: {remark}")


def is_timer_message(topic: str, properties: Mapping[str, str]) -> bool:
    """A timer message not yet in the wheel (no level: the caller checked)."""
    return (topic != TIMER_TOPIC and PROPERTY_TIMER_OUT_MS not in properties
            and any(name in properties for name in TIMER_PROPERTIES))


def _long(text: str) -> int | None:
    # Java's Long.parseLong: an optional sign and decimal digits, within a long.
    body = text[1:] if text[:1] in ("-", "+") else text
    if not body or not (body.isascii() and body.isdigit()):
        return None
    value = int(text)
    return value if -_MAX_LONG - 1 <= value <= _MAX_LONG else None


def _past(name: str, value: int, now_ms: int, timer: TimerSettings) -> str | None:
    """Why a client's timer time is in the past, if it is beyond the tolerance."""
    if name != "TIMER_DELIVER_MS":
        return f"property {name} must not be negative, got {value}" if value < 0 else None
    if now_ms - value <= timer.precision_ms:
        return None
    return (f"property {name} {value} is {now_ms - value} ms before the broker's time "
            f"{now_ms}, more than timer_precision_ms ({timer.precision_ms}): a time in "
            "the past")


def _route_timer(topic: str, queue_id: int, properties: Mapping[str, str],
                 timer: TimerSettings, now_ms: int, own: bool) -> Routed | RemotingCommand:
    if not timer.enable:
        return _timer_refused()
    name = next(name for name in TIMER_PROPERTIES if name in properties)
    value = _long(properties[name])
    if value is None:
        return _timer_illegal(f"property {name} must be an integer, got "
                              f"{properties[name][:80]!r}")
    past = None if own else _past(name, value, now_ms, timer)
    if past is not None:
        return _timer_illegal(past)
    deliver_ms = {"TIMER_DELAY_SEC": now_ms + value * 1000,
                  "TIMER_DELAY_MS": now_ms + value}.get(name, value)
    if deliver_ms <= now_ms:
        if PROPERTY_TIMER_DEL_UNIQKEY in properties:
            return _timer_illegal(f"a deletion ({PROPERTY_TIMER_DEL_UNIQKEY}) must be "
                                  "for a time ahead")
        # Due already: stored as it came, consumable at once (RocketMQ's).
        return Routed(topic, queue_id, properties)
    if PROPERTY_TIMER_DEL_UNIQKEY in properties:
        return _timer_illegal(f"{PROPERTY_TIMER_DEL_UNIQKEY}: deleting a timer message "
                              "is not supported")
    if deliver_ms - now_ms > timer.max_delay_sec * 1000:
        return _timer_illegal(
            f"{name} {properties[name][:40]} puts the delivery {deliver_ms - now_ms} ms "
            f"ahead, past the max delay of {timer.max_delay_sec * 1000} ms "
            f"(timer_max_delay_sec {timer.max_delay_sec})")
    precision = timer.precision_ms
    out_ms = (deliver_ms - precision if deliver_ms % precision == 0
              else deliver_ms // precision * precision)
    stored = {**properties, PROPERTY_TIMER_OUT_MS: str(out_ms),
              PROPERTY_REAL_TOPIC: topic, PROPERTY_REAL_QUEUE_ID: str(queue_id)}
    return Routed(TIMER_TOPIC, 0, stored)


def route_put(topic: str, queue_id: int, properties: Mapping[str, str], sys_flag: int, *,
              max_delay_level: int, timer: TimerSettings, now_ms: int, own: bool = False
              ) -> Routed | RemotingCommand:
    """Where one message with these fields is stored, or the put's refusal
    (``now_ms``: the broker's clock, the put's store time, for a timer message's time;
    ``own``: the broker's own put, whose timer time is not refused for being past)."""
    level = delay_level_of(properties)
    if level is None:
        return _illegal_delay(properties)
    if sys_flag & TRANSACTION_ROLLBACK not in (0, TRANSACTION_COMMIT):
        return Routed(topic, queue_id, properties)
    if level <= 0:
        if is_timer_message(topic, properties):
            return _route_timer(topic, queue_id, properties, timer, now_ms, own)
        return Routed(topic, queue_id, properties)
    level = min(level, max_delay_level)
    stored = {name: value for name, value in properties.items()
              if name not in TIMER_PROPERTIES}
    stored.update({PROPERTY_DELAY: str(level), PROPERTY_REAL_TOPIC: topic,
                   PROPERTY_REAL_QUEUE_ID: str(queue_id)})
    return Routed(SCHEDULE_TOPIC, level - 1, stored)


def check_batch(properties: Iterable[Mapping[str, str]], *,
                timer: TimerSettings) -> RemotingCommand | None:
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
            if not timer.enable:
                return _timer_refused()
            return RemotingCommand.response(
                ResponseCode.MESSAGE_ILLEGAL,
                remark="a batch cannot carry timer messages "
                       f"({', '.join(n for n in TIMER_PROPERTIES if n in props)})")
    return None
