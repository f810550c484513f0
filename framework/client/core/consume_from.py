"""Where a consumer group starts on a queue it has no offset for. Pure.

RocketMQ's ``computePullFromWhere``: a stored offset always wins. Without
one, ``CONSUME_FROM_LAST_OFFSET`` starts at the queue's end (only new
messages; a broker answers a brand-new group on a queue that never dropped
a message with offset 0 instead, so nothing sent before it is missed),
``CONSUME_FROM_FIRST_OFFSET`` at 0 and ``CONSUME_FROM_TIMESTAMP`` at the
first message stored at or after the consumer's timestamp (triomq's client
asks the broker not to answer 0 then, so a timestamp holds on a new queue too).
"""

from __future__ import annotations

import enum

__all__ = ["ConsumeFromWhere", "Lookup", "start_offset"]


class ConsumeFromWhere(enum.Enum):
    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


class Lookup(enum.Enum):
    """What to ask the broker for when the start is not known yet."""

    #: GET_MAX_OFFSET: the queue's end.
    MAX_OFFSET = "MAX_OFFSET"
    #: SEARCH_OFFSET_BY_TIMESTAMP with the consumer's timestamp.
    BY_TIMESTAMP = "BY_TIMESTAMP"


def start_offset(where: ConsumeFromWhere, stored: int | None) -> int | Lookup:
    """The offset to start from, or what to ask; ``stored`` is the group's offset if any."""
    if stored is not None and stored >= 0:
        return stored
    if where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
        return 0
    if where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
        return Lookup.BY_TIMESTAMP
    return Lookup.MAX_OFFSET
