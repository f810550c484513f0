"""INVOKE_BROKER_TO_RESET_OFFSET (222), pure: RocketMQ 5's server-side offset reset.

``mqadmin resetOffsetByTime -g G -t T -s TIME`` and ``skipAccumulatedMessage``
(``-s -1``) ask each master of the topic to move group G's offsets. RocketMQ
5's broker (``useServerSideResetOffset``, on by default) does it itself
instead of pushing RESET_CONSUMER_CLIENT_OFFSET to the group's clients, so
the group need not be online and the answer is the same either way:

- the header (``ResetOffsetRequestHeader``): ``topic``, ``group``,
  ``timestamp`` (-1, or any negative: the queues' ends), ``isForce`` (sent,
  and ignored by the server-side reset: a reset may move offsets forward or
  back), ``queueId`` (-1: every read queue) and ``offset`` (-1 or absent:
  none; with a queue id, the offset to move that queue to);
- refusals, in RocketMQ's order and words: a slave ("Can not reset offset
  in slave broker", SYSTEM_ERROR), a topic the broker does not hold
  (TOPIC_NOT_EXIST "Topic T does not exist"), a group it has no config for
  (SUBSCRIPTION_GROUP_NOT_EXIST "Group G does not exist"), an explicit
  offset out of the queue's range (SYSTEM_ERROR);
- each queue's new offset: the explicit one, else the queue's end for a
  negative timestamp, else the first offset stored at or after the
  timestamp (``search_queue_offset``);
- the answer's body is ``ResetOffsetBody``: ``{"offsetTable":{<queue>:offset}}``
  in fastjson's object-keyed form (as ``triomq.protocol.consume_stats.queue_map`` writes).

The broker then stores each offset as the group's committed one and keeps
it pending (``ConsumerOffsetTable.assign_reset``) until the group's next
pull of that queue, which is answered PULL_OFFSET_MOVED to the new offset
(remark OFFSET_RESET), so a consumer that is online moves too; until then
its offset updates for the queue are ignored, so its periodic commit of the
old position does not undo the reset.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import attrs

from triomq.broker.core.codes import ResponseCode
from triomq.broker.core.headers import HeaderError, java_integer
from triomq.protocol.message_queue import MessageQueue
from triomq.protocol.route import TopicConfig, dumps

__all__ = ["ResetRefused", "ResetRequest", "parse_reset_header", "reset_body",
           "reset_offsets"]

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_QUOTED = 200


@attrs.frozen
class ResetRequest:
    """``ResetOffsetRequestHeader``: ``queue_id`` -1 for every queue, ``offset`` None
    when the timestamp decides."""

    topic: str
    group: str
    timestamp: int
    force: bool = True
    queue_id: int = -1
    offset: int | None = None


@attrs.frozen
class ResetRefused:
    """Why the reset is refused: the broker's answer."""

    code: int
    remark: str


def parse_reset_header(fields: Mapping[str, str]) -> ResetRequest:
    """The request's header; ``HeaderError`` names a field missing or malformed."""
    for key in ("topic", "group"):
        if not fields.get(key):
            raise HeaderError(key, "missing or empty")
    timestamp = java_integer(fields, "timestamp", _INT64)
    if timestamp is None:
        raise HeaderError("timestamp", "missing")
    queue_id = java_integer(fields, "queueId", _INT32)
    offset = java_integer(fields, "offset", _INT64)
    return ResetRequest(
        topic=fields["topic"], group=fields["group"], timestamp=timestamp,
        # Java's Boolean.parseBoolean: "true" in any case, anything else false.
        force=fields.get("isForce", "").lower() == "true",
        queue_id=-1 if queue_id is None else queue_id,
        offset=None if offset is None or offset == -1 else offset)


def reset_offsets(request: ResetRequest, *, is_master: bool, topic: TopicConfig | None,
                  group_exists: bool, queue_range: Callable[[int], tuple[int, int]],
                  offset_at: Callable[[int, int], int]) -> dict[int, int] | ResetRefused:
    """Each queue's new offset by queue id, or why there is none.

    ``queue_range(q)``: the queue's min and max offsets; ``offset_at(q, ts)``:
    its first offset stored at or after ``ts`` (its end if none).
    """
    if not is_master:
        return ResetRefused(ResponseCode.SYSTEM_ERROR, "Can not reset offset in slave broker")
    if topic is None:
        return ResetRefused(ResponseCode.TOPIC_NOT_EXIST,
                            f"Topic {request.topic[:_QUOTED]} does not exist")
    if not group_exists:
        return ResetRefused(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                            f"Group {request.group[:_QUOTED]} does not exist")

    def by_time(queue_id: int) -> int:
        if request.timestamp < 0:
            return queue_range(queue_id)[1]
        return offset_at(queue_id, request.timestamp)

    if request.queue_id < 0:
        return {q: by_time(q) for q in range(topic.read_queue_nums)}
    if request.offset is None:
        return {request.queue_id: by_time(request.queue_id)}
    low, high = queue_range(request.queue_id)
    # RocketMQ's bounds, one past the end included.
    if request.offset < low or request.offset > high + 1:
        return ResetRefused(ResponseCode.SYSTEM_ERROR, (
            f"Target offset {request.offset} not in consume queue range [{low}-{high}]"))
    return {request.queue_id: request.offset}


def reset_body(topic: str, broker_name: str, offsets: Mapping[int, int]) -> bytes:
    """``ResetOffsetBody`` as fastjson writes it."""
    table = {MessageQueue(topic, broker_name, q): o for q, o in offsets.items()}
    return b'{"offsetTable":' + _long_map(table) + b"}"


def _long_map(table: Mapping[MessageQueue, int]) -> bytes:
    """A ``Map<MessageQueue, Long>`` in fastjson's form (``queue_map`` writes beans)."""
    return (b"{" + b",".join(dumps(q.to_json()) + b":" + dumps(o)
                             for q, o in sorted(table.items())) + b"}")
