"""A pull against a store, pure: what the pull drivers read and in which order.

``triomq.broker.consume.core.pull`` holds the rules as functions of values; this module
applies them to a store seen through ``QueueStore`` (the calls of
``triomq.store.CommitLog`` a pull needs); the broker's pull flow
(``pull_flow``, which the trio driver and the cluster simulation run)
sequences them:

- ``slave_refusal``: RocketMQ's ``rejectRequest``, a slave without
  ``slave_read_enable`` refusing pulls while its group has a master;
- ``confirmed_queue_max``: a queue's end as consumers see it, up to its
  last record within the confirm offset (``pull.confirmed_max_offset``);
- ``confirmed_entries``: a batch of a queue's entries within that end, with
  the queue's bounds: what the broker's own readers of a queue (the
  schedule, the timer wheel, the revive) ask for;
- ``look_up``: the queue's offsets and entries from the store, then
  ``get_messages`` and ``answer``;
- ``reset_answer``: the answer to the group's first pull of a queue after an
  admin reset, OFFSET_MOVED to the reset offset, without reading its entries.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple, Protocol

from triomq.broker.consume.core.pull import (
    Entry,
    GetMessageStatus,
    GetResult,
    PullAnswer,
    PullHeader,
    PullLimits,
    PullRefused,
    answer,
    confirmed_max_offset,
    get_messages,
)
from triomq.broker.consume.core.subscription import Subscription
from triomq.protocol.route import TopicConfig

__all__ = [
    "SYSTEM_BUSY",
    "ConfirmedEntries",
    "QueueStore",
    "confirmed_entries",
    "confirmed_queue_max",
    "look_up",
    "reset_answer",
    "slave_refusal",
]

#: RocketMQ's ``ResponseCode.SYSTEM_BUSY``.
SYSTEM_BUSY = 2
_QUOTED = 80


class QueueStore(Protocol):
    """What a pull reads of a commit log: its range and its consume queues."""

    @property
    def min_offset(self) -> int: ...

    @property
    def max_offset(self) -> int: ...

    def queue_min_offset(self, topic: str, queue_id: int) -> int: ...

    def queue_max_offset(self, topic: str, queue_id: int) -> int: ...

    def queue_entries(self, topic: str, queue_id: int, start: int, max_count: int
                      ) -> Sequence[Entry]: ...


def slave_refusal(broker_name: str, *, is_master: bool, slave_read_enable: bool,
                  master_online: bool) -> PullRefused | None:
    """The SYSTEM_BUSY refusal of a slave without ``slave_read_enable`` while its group has
    a master; None when the pull is served."""
    if is_master or slave_read_enable or not master_online:
        return None
    return PullRefused(SYSTEM_BUSY, f"broker {broker_name[:_QUOTED]} is a slave without "
                                    f"slave_read_enable: pull from its master")


def confirmed_queue_max(store: QueueStore, topic: str, queue_id: int, confirm_offset: int
                        ) -> int:
    """The queue's max offset as consumers see it: up to its last confirmed record."""

    def entry_end(queue_offset: int) -> int:
        (entry,) = store.queue_entries(topic, queue_id, queue_offset, 1)
        return entry[1] + entry[2]

    return confirmed_max_offset(store.queue_min_offset(topic, queue_id),
                                store.queue_max_offset(topic, queue_id), confirm_offset,
                                entry_end)


class ConfirmedEntries(NamedTuple):
    """Entries of a queue from an offset, and the queue's bounds as consumers see them."""

    entries: Sequence[Entry]
    queue_min: int
    queue_max: int


def confirmed_entries(store: QueueStore, topic: str, queue_id: int, start: int,
                      max_count: int, confirm_offset: int) -> ConfirmedEntries:
    """Up to ``max_count`` entries of the queue from ``start``, below its confirmed end;
    none when ``start`` is below the queue's first entry (the reader moves to
    ``queue_min``, which comes with them)."""
    queue_min = store.queue_min_offset(topic, queue_id)
    queue_max = confirmed_queue_max(store, topic, queue_id, confirm_offset)
    count = min(max_count, queue_max - start)
    entries = (store.queue_entries(topic, queue_id, start, count)
               if count > 0 and start >= queue_min else [])
    return ConfirmedEntries(entries, queue_min, queue_max)


def look_up(store: QueueStore, header: PullHeader, subscription: Subscription, *,
            limits: PullLimits, topic: TopicConfig | None, confirm_offset: int,
            is_master: bool, master_online: bool, slave_read_enable: bool,
            offset_check_in_slave: bool, allow_suspend: bool) -> PullAnswer:
    """A pull's answer from ``store`` now (``topic``: the topic's config, for its sysFlag;
    the queue read up to ``confirm_offset``)."""
    topic_name, queue_id = header.topic, header.queue_id
    min_offset = store.queue_min_offset(topic_name, queue_id)
    max_offset = confirmed_queue_max(store, topic_name, queue_id, confirm_offset)
    entries: Iterable[Entry] = ()
    if min_offset <= header.queue_offset < max_offset:
        entries = _scan(store, topic_name, queue_id, header.queue_offset,
                        limits.scan_count(header.max_msg_nums), max(1, header.max_msg_nums + 1))
    result = get_messages(
        header, subscription, min_offset=min_offset, max_offset=max_offset, entries=entries,
        log_min_offset=store.min_offset, log_max_offset=store.max_offset, limits=limits,
        correct_offsets=is_master or offset_check_in_slave)
    return answer(result, header, topic_sys_flag=topic.topic_sys_flag if topic else 0,
                  is_master=is_master, master_online=master_online,
                  slave_read_enable=slave_read_enable,
                  offset_check_in_slave=offset_check_in_slave, allow_suspend=allow_suspend)


def reset_answer(store: QueueStore, header: PullHeader, offset: int, *,
                 topic: TopicConfig | None, confirm_offset: int, is_master: bool,
                 master_online: bool, slave_read_enable: bool, offset_check_in_slave: bool
                 ) -> PullAnswer:
    """The answer to a pull after an admin reset of its queue to ``offset``: OFFSET_MOVED
    there (remark OFFSET_RESET), with the queue's offsets from ``store``."""
    topic_name, queue_id = header.topic, header.queue_id
    result = GetResult(GetMessageStatus.OFFSET_RESET, offset,
                       store.queue_min_offset(topic_name, queue_id),
                       confirmed_queue_max(store, topic_name, queue_id, confirm_offset))
    return answer(result, header, topic_sys_flag=topic.topic_sys_flag if topic else 0,
                  is_master=is_master, master_online=master_online,
                  slave_read_enable=slave_read_enable,
                  offset_check_in_slave=offset_check_in_slave)


def _scan(store: QueueStore, topic: str, queue_id: int, start: int, count: int, chunk: int
          ) -> Iterator[Entry]:
    """Up to ``count`` entries from ``start``, read ``chunk`` at a time, then twice as many
    each time (a tag filter may skip many): a pull mostly ends with its first chunk,
    long before the filter window that bounds its scan."""
    end = start + count
    while start < end:
        want = min(chunk, end - start)
        got = store.queue_entries(topic, queue_id, start, want)
        yield from got
        if len(got) < want:
            return
        start += want
        chunk *= 2
