"""RocketMQ's delay levels and the schedule topic's consume-queue tags code.

``messageDelayLevel`` is a space-separated list of delays, level 1 first,
each a number and a unit: ``s``, ``m``, ``h``, ``d`` as RocketMQ's
``ScheduleMessageService.parseDelayLevel`` reads them, and ``ms`` (not
RocketMQ's) for short levels in tests.

A delayed message waits under ``SCHEDULE_TOPIC_XXXX``, queue ``level - 1``.
Its consume-queue entry's tags code is its delivery time, not a tags hash:
the store timestamp plus its level's delay, the level read from the
record's ``DELAY`` property and clamped to the highest level (RocketMQ's
``CommitLog.checkMessageAndReturnSize`` and
``DefaultMessageStore.computeDeliverTimestamp``: a level without a delay in
the table waits 1 s). Every place that makes a consume-queue entry (the
append, a slave's append of replicated bytes, recovery) uses
``cq_tags_code`` so that they agree.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

from triomq.protocol.message import PROPERTY_DELAY

__all__ = [
    "DEFAULT_MESSAGE_DELAY_LEVEL",
    "PROPERTY_REAL_QUEUE_ID",
    "PROPERTY_REAL_TOPIC",
    "SCHEDULE_TOPIC",
    "cq_tags_code",
    "delay_level_of",
    "deliver_timestamp",
    "parse_delay_levels",
    "schedule_tags_code",
]

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
#: Where a delayed (or otherwise rerouted) message is to be delivered.
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
DEFAULT_MESSAGE_DELAY_LEVEL = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
#: The delay of a level the table does not hold (computeDeliverTimestamp's).
_UNKNOWN_LEVEL_DELAY_MS = 1000
_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


@functools.lru_cache(maxsize=16)
def parse_delay_levels(text: str) -> tuple[int, ...]:
    """The delays in ms of ``text`` (``messageDelayLevel``), level 1 first; ``ValueError``
    naming the first bad level."""
    levels = []
    for number, value in enumerate(text.split(), 1):
        unit = "ms" if value.endswith("ms") else value[-1:]
        digits = value[:-len(unit)] if unit in _UNITS else ""
        if not (digits.isascii() and digits.isdigit()):
            raise ValueError(f"level {number} {value!r}: expected a whole number and a unit "
                             f"of {', '.join(_UNITS)}, e.g. '5s'")
        levels.append(int(digits) * _UNITS[unit])
    if not levels:
        raise ValueError("expected at least one level, e.g. '1s 5s 10s'")
    return tuple(levels)


def delay_level_of(properties: Mapping[str, str]) -> int | None:
    """The ``DELAY`` property as Java's ``Integer.parseInt`` reads it: 0 when absent, None
    when it is not an integer."""
    raw = properties.get(PROPERTY_DELAY)
    if raw is None:
        return 0
    digits = raw[1:] if raw[:1] in ("-", "+") else raw
    if not (digits.isascii() and digits.isdigit()) or not -(2**31) <= int(raw) < 2**31:
        return None
    return int(raw)


def deliver_timestamp(levels: Sequence[int], level: int, store_timestamp: int) -> int:
    """When a message of ``level`` stored at ``store_timestamp`` is due (ms)."""
    delay = levels[level - 1] if 1 <= level <= len(levels) else _UNKNOWN_LEVEL_DELAY_MS
    return store_timestamp + delay


def schedule_tags_code(properties: Mapping[str, str], store_timestamp: int,
                       levels: Sequence[int]) -> int | None:
    """A schedule-topic record's delivery time, or None when its ``DELAY`` gives none (no
    level, not an integer, or not above 0): its tags code is then the tags hash."""
    level = delay_level_of(properties)
    if not level:
        return None
    level = min(level, len(levels))
    return deliver_timestamp(levels, level, store_timestamp) if level > 0 else None


def cq_tags_code(topic: str, properties: Mapping[str, str], store_timestamp: int,
                 levels: Sequence[int], tags_hash: int) -> int:
    """A record's consume-queue tags code: ``tags_hash`` (its ``TAGS``' hash), or for a
    schedule-topic record its delivery time."""
    if topic != SCHEDULE_TOPIC:
        return tags_hash
    code = schedule_tags_code(properties, store_timestamp, levels)
    return tags_hash if code is None else code
