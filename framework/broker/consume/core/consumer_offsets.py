"""Consumer offsets, pure: RocketMQ's ``ConsumerOffsetManager`` and ``consumerOffset.json``.

The table maps ``"topic@group"`` to ``{queueId: offset}``, the next queue
offset a consumer group will consume, under a ``DataVersion`` that moves
every ``consumer_offset_update_version_step`` commits (RocketMQ's rule: the
version is a hint for copies, not a change counter; ``revision`` counts
every change, for the broker's writes). ``encode`` is the file as RocketMQ
writes it under ``<store root>/config/`` and GET_ALL_CONSUMER_OFFSET's
body: ``{"dataVersion": ..., "offsetTable": {"topic@group": {"0": 42}}}``.
fastjson writes the queue ids as bare numbers (``{0:42}``, not JSON);
``decode`` reads both, and fastjson reads the quoted form triomq writes.

A slave takes its master's table with ``adopt_master``: as RocketMQ's
``SlaveSynchronize``, every ``topic@group`` the master holds replaces the
slave's, those only the slave holds stay, and the master's DataVersion is
taken. It copies every time: the version moves only every so many
commits, so an equal version does not mean equal offsets.

An admin reset (INVOKE_BROKER_TO_RESET_OFFSET) stores the new offset and
keeps it pending, in memory only as RocketMQ 5's ``resetOffsetTable``
(``assign_reset``), until the group's next pull of the queue takes it
(``take_reset``); while it is pending the group's offset updates for the
queue are ignored (``has_reset``).

The request rules: ``parse_offset_header`` reads QUERY_CONSUMER_OFFSET's
and UPDATE_CONSUMER_OFFSET's headers, ``query_answer`` is RocketMQ's
``queryConsumerOffset`` once the table has been asked, ``answer_query`` asks
the table and the store for it, ``update_refusal`` says why an update is
refused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from triomq.broker.consume.core.pull_lookup import QueueStore
from triomq.broker.core.headers import HeaderError, java_integer
from triomq.protocol.route import DataVersion, RouteDataError, TopicConfig, dumps, loads

__all__ = [
    "TOPIC_GROUP_SEPARATOR",
    "ConsumerOffsetTable",
    "OffsetHeader",
    "QueryAnswer",
    "answer_query",
    "parse_offset_header",
    "query_answer",
    "update_refusal",
]

TOPIC_GROUP_SEPARATOR = "@"
#: RocketMQ's ``ResponseCode`` values of a query's answer.
SUCCESS = 0
TOPIC_NOT_EXIST = 17
QUERY_NOT_FOUND = 22
SUBSCRIPTION_GROUP_NOT_EXIST = 26
INVALID_PARAMETER = 29

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_QUOTED = 80


class ConsumerOffsetTable:
    """Every consumer group's offsets on one broker, and their DataVersion."""

    def __init__(self, offsets: Mapping[str, Mapping[int, int]] | None = None,
                 data_version: DataVersion | None = None, *, version_step: int = 500) -> None:
        self._offsets = {key: dict(queues) for key, queues in (offsets or {}).items()}
        self.data_version = data_version if data_version is not None else DataVersion()
        self.version_step = version_step
        #: Moves with every change: the broker writes the file when it moved.
        self.revision = 0
        self._commits = 0
        #: Offsets an admin reset and the group's next pull of the queue has not yet
        #: been told of, by ``topic@group`` (RocketMQ's resetOffsetTable: in memory only).
        self._resets: dict[str, dict[int, int]] = {}

    def commit(self, group: str, topic: str, queue_id: int, offset: int, now_ms: int) -> None:
        """Store ``offset`` as the group's next offset in the queue."""
        self._offsets.setdefault(topic + TOPIC_GROUP_SEPARATOR + group, {})[queue_id] = offset
        self.revision += 1
        self._commits += 1
        if self._commits % self.version_step == 0:
            self.data_version = self.data_version.next(now_ms)

    def assign_reset(self, group: str, topic: str, queue_id: int, offset: int,
                     now_ms: int) -> None:
        """An admin reset: ``offset`` is stored and pending until ``take_reset``."""
        self._resets.setdefault(topic + TOPIC_GROUP_SEPARATOR + group, {})[queue_id] = offset
        self.commit(group, topic, queue_id, offset, now_ms)

    def has_reset(self, group: str, topic: str, queue_id: int) -> bool:
        """Whether a reset of the queue is pending (the group's commits are then ignored)."""
        return queue_id in self._resets.get(topic + TOPIC_GROUP_SEPARATOR + group, {})

    def take_reset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The pending reset of the queue, no longer pending; None if there is none."""
        key = topic + TOPIC_GROUP_SEPARATOR + group
        pending = self._resets.get(key)
        if pending is None or queue_id not in pending:
            return None
        offset = pending.pop(queue_id)
        if not pending:
            del self._resets[key]
        return offset

    def truncated(self, queue_max: Callable[[str, int], int]) -> bool:
        """The log lost its tail (a slave cut it to its new master's): an offset past its
        queue's end now (``queue_max(topic, queue_id)``) goes back to it, for the entries
        there are others, which no group consumed. Whether any moved."""
        moved = False
        for key, queues in self._offsets.items():
            topic = key.partition(TOPIC_GROUP_SEPARATOR)[0]
            for queue_id, offset in queues.items():
                end = queue_max(topic, queue_id)
                if offset > end:
                    queues[queue_id] = end
                    moved = True
        if moved:
            self.revision += 1
        return moved

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        """The group's stored offset in the queue, None if it stored none."""
        return self._offsets.get(topic + TOPIC_GROUP_SEPARATOR + group, {}).get(queue_id)

    def topics_of(self, group: str) -> set[str]:
        """The topics ``group`` stored offsets for (RocketMQ's ``whichTopicByConsumer``)."""
        topics = set()
        for key in self._offsets:
            topic, _, owner = key.rpartition(TOPIC_GROUP_SEPARATOR)
            if owner == group:
                topics.add(topic)
        return topics

    def groups_of(self, topic: str) -> set[str]:
        """The groups that stored offsets for ``topic`` (RocketMQ's ``whichGroupByTopic``)."""
        groups = set()
        for key in self._offsets:
            stored, _, group = key.rpartition(TOPIC_GROUP_SEPARATOR)
            if stored == topic:
                groups.add(group)
        return groups

    def remove_group(self, group: str) -> bool:
        """Forget every offset of ``group`` (DELETE_SUBSCRIPTIONGROUP with cleanOffset);
        whether it had any."""
        for key in [k for k in self._resets if k.rpartition(TOPIC_GROUP_SEPARATOR)[2] == group]:
            del self._resets[key]
        keys = [k for k in self._offsets if k.rpartition(TOPIC_GROUP_SEPARATOR)[2] == group]
        for key in keys:
            del self._offsets[key]
        if keys:
            self.revision += 1
        return bool(keys)

    def offsets(self) -> dict[str, dict[int, int]]:
        """A copy of the table: ``"topic@group"`` -> ``{queueId: offset}``."""
        return {key: dict(queues) for key, queues in self._offsets.items()}

    def adopt_master(self, master: ConsumerOffsetTable) -> bool:
        """Take the master's offsets and DataVersion (a slave's copy); whether anything
        changed."""
        merged = {**self._offsets, **master.offsets()}
        if merged == self._offsets and master.data_version == self.data_version:
            return False
        self._offsets = merged
        self.data_version = master.data_version
        self.revision += 1
        return True

    # -- consumerOffset.json ----------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {"dataVersion": self.data_version.to_json(),
                "offsetTable": {key: {str(q): o for q, o in sorted(queues.items())}
                                for key, queues in sorted(self._offsets.items())}}

    def encode(self) -> bytes:
        """``consumerOffset.json`` (also GET_ALL_CONSUMER_OFFSET's body)."""
        return dumps(self.to_json())

    @classmethod
    def decode(cls, data: bytes, *, version_step: int = 500) -> ConsumerOffsetTable:
        """A table from ``consumerOffset.json``; ``RouteDataError`` names what is wrong."""
        obj = loads(data, "consumerOffset.json")
        if not isinstance(obj, dict):
            raise RouteDataError("consumerOffset.json: expected an object")
        table = obj.get("offsetTable")
        table = {} if table is None else table
        if not isinstance(table, dict):
            raise RouteDataError("consumerOffset.json: offsetTable: expected an object")
        offsets: dict[str, dict[int, int]] = {}
        for key, queues in table.items():
            where = f"consumerOffset.json: offsetTable.{key[:_QUOTED]}"
            if not isinstance(queues, dict):
                raise RouteDataError(f"{where}: expected an object")
            offsets[key] = {}
            for queue_id, offset in queues.items():
                if not _is_int_text(queue_id) or isinstance(offset, bool) \
                        or not isinstance(offset, int):
                    raise RouteDataError(f"{where}: expected queue id -> offset, got "
                                         f"{queue_id[:_QUOTED]!r}: {offset!r}")
                offsets[key][int(queue_id)] = offset
        return cls(offsets, DataVersion.from_json(obj.get("dataVersion") or {}),
                   version_step=version_step)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, ConsumerOffsetTable) and self._offsets == other._offsets
                and self.data_version == other.data_version)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ConsumerOffsetTable({len(self._offsets)} topic@group, {self.data_version})"


def _is_int_text(text: str) -> bool:
    digits = text[1:] if text[:1] == "-" else text
    return digits.isascii() and digits.isdigit() and len(digits) <= 10


@attrs.frozen
class OffsetHeader:
    """QUERY_CONSUMER_OFFSET's or UPDATE_CONSUMER_OFFSET's header."""

    consumer_group: str
    topic: str
    queue_id: int
    commit_offset: int | None = None
    set_zero_if_not_found: bool | None = None


def _integer(fields: Mapping[str, str], key: str, bounds: tuple[int, int]) -> int:
    value = java_integer(fields, key, bounds) if fields.get(key) else None
    if value is None:  # absent or empty
        raise HeaderError(key, "missing")
    return value


def parse_offset_header(fields: Mapping[str, str], *, commit: bool) -> OffsetHeader:
    """The ``UpdateConsumerOffsetRequestHeader`` (``commit``) or
    ``QueryConsumerOffsetRequestHeader`` in ``fields``; ``HeaderError`` names a
    field missing or malformed."""
    for key in ("consumerGroup", "topic"):
        if not fields.get(key):
            raise HeaderError(key, "missing or empty")
    zero = fields.get("setZeroIfNotFound")
    return OffsetHeader(
        consumer_group=fields["consumerGroup"],
        topic=fields["topic"],
        queue_id=_integer(fields, "queueId", _INT32),
        commit_offset=_integer(fields, "commitOffset", _INT64) if commit else None,
        # Java's Boolean.parseBoolean: "true" in any case, anything else false.
        set_zero_if_not_found=None if zero is None else zero.lower() == "true",
    )


@attrs.frozen
class QueryAnswer:
    """QUERY_CONSUMER_OFFSET's answer: a code, the offset on SUCCESS, a remark."""

    code: int
    offset: int | None = None
    remark: str | None = None


def query_answer(stored: int | None, header: OffsetHeader, *, queue_min_offset: int,
                 first_message_in_memory: bool) -> QueryAnswer:
    """RocketMQ's answer to a query: the stored offset; with none, 0 for a queue whose
    first message is still at offset 0 and in memory (a new group starts at the
    beginning), unless the consumer said ``setZeroIfNotFound`` false; else
    QUERY_NOT_FOUND."""
    if stored is not None and stored >= 0:
        return QueryAnswer(SUCCESS, stored)
    if header.set_zero_if_not_found is False:
        return QueryAnswer(QUERY_NOT_FOUND, None,
                           "Not found, do not set to zero, maybe this group boot first")
    if queue_min_offset <= 0 and first_message_in_memory:
        return QueryAnswer(SUCCESS, 0)
    return QueryAnswer(QUERY_NOT_FOUND, None,
                       f"Not found: group [{header.consumer_group[:_QUOTED]}] stored no offset "
                       f"for topic [{header.topic[:_QUOTED]}] queue {header.queue_id}")


def answer_query(table: ConsumerOffsetTable, header: OffsetHeader, store: QueueStore, *,
                 memory_window: int) -> QueryAnswer:
    """QUERY_CONSUMER_OFFSET's answer from the table and the queue in ``store``: its first
    message counts as in memory within ``memory_window`` bytes of the log's end."""
    topic, queue_id = header.topic, header.queue_id
    first = store.queue_entries(topic, queue_id, 0, 1)
    in_memory = bool(first) and store.max_offset - first[0][1] <= memory_window
    return query_answer(table.query(header.consumer_group, topic, queue_id), header,
                        queue_min_offset=store.queue_min_offset(topic, queue_id),
                        first_message_in_memory=in_memory)


def update_refusal(header: OffsetHeader, topic: TopicConfig | None, *, group_known: bool
                   ) -> tuple[int, str] | None:
    """Why UPDATE_CONSUMER_OFFSET is refused (code, remark), None if it is taken: the group
    must be known, the topic held and the queue id one of its queues (RocketMQ does not
    check that, and a client could then fill the table with queues that do not exist)."""
    group, name = header.consumer_group[:_QUOTED], header.topic[:_QUOTED]
    if not group_known:
        return SUBSCRIPTION_GROUP_NOT_EXIST, f"Group {group} not exist!"
    if topic is None:
        return TOPIC_NOT_EXIST, f"Topic {name} not exist!"
    if not 0 <= header.queue_id < topic.read_queue_nums:
        return INVALID_PARAMETER, (f"queueId[{header.queue_id}] is illegal, topic:[{name}] "
                                   f"topicConfig.readQueueNums:[{topic.read_queue_nums}]")
    return None
