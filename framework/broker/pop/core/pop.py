"""POP_MESSAGE 200050's rules: the header, the refusals and what a pop takes. Pure.

``PopMessageRequestHeader``'s fields are ``consumerGroup``, ``topic``,
``queueId`` (-1: every queue of the topic), ``maxMsgNums`` (1 to 32),
``invisibleTime`` (ms the messages stay invisible), ``pollTime`` (ms to
wait for messages when there are none), ``bornTime``, ``initMode`` (where a
group's first pop of a queue starts: 0 the queue's last message, 1 its
first), ``expType``/``exp`` (a tag filter) and ``order``, ``attemptId``.
Orderly pops (``order`` true) are refused: they are not built.

``plan_pop`` reads the queues as a pull does (up to the confirm offset),
RocketMQ's order: the group's pop retry topic first for
``pop_from_retry_probability`` percent of pops, then the topic's queues
from a random one, then the retry topic when the pop is not full. Each
queue read gives a ``QueuePick``: the offsets taken (those the filter
matches), where the group's pop offset moves to and the checkpoint the
driver writes to the revive topic before it answers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from triomq.broker.consume.core.pull import Entry
from triomq.broker.consume.core.pull_lookup import QueueStore, confirmed_queue_max
from triomq.broker.consume.core.subscription import (
    Subscription,
    SubscriptionRefused,
    parse_subscription,
)
from triomq.broker.consume.core.subscription_groups import SubscriptionGroupConfig
from triomq.broker.pop.core.checkpoint import CheckPoint
from triomq.broker.pop.core.receipt import build_offset_info
from triomq.protocol.header_fields import INT32, INT64, HeaderFields
from triomq.protocol.response_codes import ResponseCode
from triomq.protocol.route import PERM_READ, TopicConfig

__all__ = [
    "MAX_POP_NUMS",
    "PopHeader",
    "PopPlan",
    "PopRefused",
    "QueuePick",
    "admit_pop",
    "parse_pop_header",
    "plan_pop",
]

#: RocketMQ's most messages of one pop.
MAX_POP_NUMS = 32
_QUOTED = 80


class PopRefused(ValueError):
    """A refused pop, ack or change: RocketMQ's code and a remark."""

    def __init__(self, code: int, remark: str) -> None:
        self.code = code
        self.remark = remark
        super().__init__(remark)


@attrs.frozen
class PopHeader:
    consumer_group: str
    topic: str
    queue_id: int
    max_msg_nums: int
    invisible_time: int
    poll_time: int
    born_time: int
    init_mode: int
    exp_type: str | None = None
    exp: str | None = None


def _fields(fields: dict[str, str] | object, where: str) -> HeaderFields:
    def error(message: str) -> Exception:
        return PopRefused(ResponseCode.INVALID_PARAMETER, message)
    return HeaderFields(fields, where, error=error)  # type: ignore[arg-type]


def parse_pop_header(fields: dict[str, str]) -> PopHeader:
    """The header, or ``PopRefused`` naming the field at fault."""
    read = _fields(fields, "POP_MESSAGE")
    header = PopHeader(
        consumer_group=read.string("consumerGroup"), topic=read.string("topic"),
        queue_id=read.integer("queueId", (-1, INT32[1])),
        max_msg_nums=read.integer("maxMsgNums", INT32),
        invisible_time=read.integer("invisibleTime", INT64),
        poll_time=read.integer("pollTime", INT64), born_time=read.integer("bornTime", INT64),
        init_mode=read.integer("initMode", INT32),
        exp_type=fields.get("expType") or None, exp=fields.get("exp") or None)
    if header.invisible_time < 0:
        raise PopRefused(ResponseCode.INVALID_PARAMETER,
                         f"POP_MESSAGE: header field 'invisibleTime': {header.invisible_time} "
                         f"is negative")
    if header.poll_time < 0:
        raise PopRefused(ResponseCode.INVALID_PARAMETER,
                         f"POP_MESSAGE: header field 'pollTime': {header.poll_time} is negative")
    if not 0 < header.max_msg_nums <= MAX_POP_NUMS:
        raise PopRefused(ResponseCode.INVALID_PARAMETER,
                         f"POP_MESSAGE: header field 'maxMsgNums': {header.max_msg_nums} is "
                         f"not in [1, {MAX_POP_NUMS}]")
    if header.init_mode not in (0, 1):
        raise PopRefused(ResponseCode.INVALID_PARAMETER,
                         f"POP_MESSAGE: header field 'initMode': {header.init_mode} is "
                         f"neither 0 (last) nor 1 (first)")
    if read.boolean("order"):
        raise PopRefused(ResponseCode.INVALID_PARAMETER,
                         "POP_MESSAGE: header field 'order': orderly pop is not built")
    return header


def admit_pop(header: PopHeader, topic: TopicConfig | None,
              group: SubscriptionGroupConfig | None) -> Subscription:
    """The pop's filter once it passes RocketMQ's checks, or ``PopRefused``."""
    name = header.topic[:_QUOTED]
    if topic is None:
        raise PopRefused(ResponseCode.TOPIC_NOT_EXIST,
                         f"topic[{name}] not exist, apply first please!")
    if not topic.perm & PERM_READ:
        raise PopRefused(ResponseCode.NO_PERMISSION,
                         f"the topic[{name}] peeking message is forbidden")
    if header.queue_id >= topic.read_queue_nums:
        raise PopRefused(ResponseCode.INVALID_PARAMETER,
                         f"queueId[{header.queue_id}] is illegal, topic:[{name}] "
                         f"topicConfig.readQueueNums:[{topic.read_queue_nums}]")
    if group is None:
        raise PopRefused(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                         f"subscription group [{header.consumer_group[:_QUOTED]}] does not "
                         f"exist")
    if not group.consume_enable:
        raise PopRefused(ResponseCode.NO_PERMISSION,
                         f"subscription group no permission, {header.consumer_group[:_QUOTED]}")
    try:
        return parse_subscription(header.exp, header.exp_type)
    except SubscriptionRefused as exc:
        raise PopRefused(exc.code, exc.remark) from None


@attrs.frozen
class QueuePick:
    """What a pop takes from one queue."""

    topic: str
    queue_id: int
    #: The group's pop offset before the pop: the checkpoint's start.
    start_offset: int
    #: Where the group's pop offset moves to once the checkpoint is stored.
    next_offset: int
    #: The entries taken, in queue order.
    entries: tuple[Entry, ...]
    #: Messages left in the queue after the pick.
    rest: int

    def checkpoint(self, header: PopHeader, pop_time: int, broker_name: str) -> CheckPoint:
        return CheckPoint(
            topic=self.topic, group=header.consumer_group, queue_id=self.queue_id,
            start_offset=self.start_offset, pop_time=pop_time,
            invisible_time=header.invisible_time, broker_name=broker_name,
            offset_diffs=[entry[0] - self.start_offset for entry in self.entries])


@attrs.frozen
class PopPlan:
    picks: tuple[QueuePick, ...]

    @property
    def found(self) -> bool:
        return any(pick.entries for pick in self.picks)

    def rest(self) -> int:
        return sum(pick.rest for pick in self.picks)

    def offset_infos(self) -> tuple[str, str]:
        """``startOffsetInfo`` and ``msgOffsetInfo`` of the picks that took messages."""
        taken = [p for p in self.picks if p.entries]
        return (build_offset_info([(p.topic, p.queue_id, [p.start_offset]) for p in taken],
                                  start_only=True),
                build_offset_info([(p.topic, p.queue_id, [e[0] for e in p.entries])
                                   for p in taken], start_only=False))


def _start_offset(store: QueueStore, topic: str, queue_id: int, stored: int | None,
                  init_mode: int, retry: bool) -> int:
    """The group's pop offset, or where its first pop of the queue starts (RocketMQ's
    ``getInitOffset``: the queue's first message for ``initMode`` 1 and retry topics, else
    its last one)."""
    queue_min = store.queue_min_offset(topic, queue_id)
    if stored is not None and stored >= queue_min:
        return stored
    if stored is not None or init_mode == 1 or retry:
        return queue_min
    return max(queue_min, store.queue_max_offset(topic, queue_id) - 1)


def _pick(store: QueueStore, topic: str, queue_id: int, start: int, want: int,
          subscription: Subscription, confirm_offset: int, scan_limit: int) -> QueuePick:
    queue_max = confirmed_queue_max(store, topic, queue_id, confirm_offset)
    taken: list[Entry] = []
    next_offset = start
    if start < queue_max:
        for entry in store.queue_entries(topic, queue_id, start,
                                         min(scan_limit, queue_max - start)):
            if len(taken) >= want:
                break
            next_offset = entry[0] + 1
            if subscription.matches(entry[3]):
                taken.append(entry)
    return QueuePick(topic, queue_id, start, next_offset, tuple(taken),
                     max(0, queue_max - next_offset))


def plan_pop(store: QueueStore, header: PopHeader, subscription: Subscription, *,
             topic: TopicConfig, retry: TopicConfig | None, random_q: int,
             pop_offset: Callable[[str, int], int | None], confirm_offset: int,
             pop_from_retry_probability: int, scan_limit: int) -> PopPlan:
    """What the pop takes now. ``random_q`` is in [0, 100); ``pop_offset(topic, queue)``
    the group's stored pop offset (None: it has none)."""
    picks: list[QueuePick] = []
    every = Subscription()

    def read(config: TopicConfig, is_retry: bool) -> None:
        queues: Sequence[int]
        if header.queue_id >= 0 and not is_retry:
            queues = (header.queue_id,)
        else:
            count = config.read_queue_nums
            queues = [(random_q + i) % count for i in range(count)] if count else ()
        for queue_id in queues:
            want = header.max_msg_nums - sum(len(p.entries) for p in picks)
            if want <= 0:
                return
            name = config.topic_name
            start = _start_offset(store, name, queue_id, pop_offset(name, queue_id),
                                  header.init_mode, is_retry)
            # A retry topic holds only what the group's pops left un-acked: every message.
            picks.append(_pick(store, name, queue_id, start, want,
                               every if is_retry else subscription, confirm_offset,
                               scan_limit))

    retry_first = retry is not None and random_q < pop_from_retry_probability
    if retry is not None and retry_first:
        read(retry, True)
    read(topic, False)
    if retry is not None and not retry_first:
        read(retry, True)
    return PopPlan(tuple(picks))
