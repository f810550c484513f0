"""Pulls, pure: RocketMQ's PULL_MESSAGE header, its store lookup and its answer.

Three steps, each a function of values (no store, no clock):

1. ``parse_pull_header`` reads a ``PullMessageRequestHeader`` (a field
   missing or not a number: ``HeaderError`` naming it).
2. ``admit`` runs the checks RocketMQ's ``PullMessageProcessor`` makes
   before it reads anything, in its order: the consumer group is known
   (SUBSCRIPTION_GROUP_NOT_EXIST), the topic exists (TOPIC_NOT_EXIST) and
   is readable (NO_PERMISSION), the queue id is below its read queue count
   (INVALID_PARAMETER), and the subscription: the one the request carries
   (sysFlag bit 4) or the one the group registered
   (SUBSCRIPTION_NOT_EXIST / SUBSCRIPTION_NOT_LATEST). Refusals raise
   ``PullRefused`` with the code and a remark naming what.
3. ``get_messages`` is ``DefaultMessageStore.getMessage``: from the queue's
   offsets and the consume-queue entries at the requested offset it picks
   the records to send (``GetResult``: a ``GetMessageStatus``, the
   nextBeginOffset, the byte ranges of the records in the commit log);
   ``answer`` is ``composeResponseHeader`` and the result handler: the
   response code, the header fields every answer carries
   (``nextBeginOffset``, ``minOffset``, ``maxOffset``,
   ``suggestWhichBrokerId``), and whether to hold the pull.

Statuses, codes and nextBeginOffset (a slave keeps the requested offset
unless ``offset_check_in_slave``, as RocketMQ's ``nextOffsetCorrection``):

============================  ==========================  =====================
status                        when                        code, nextBeginOffset
============================  ==========================  =====================
NO_MESSAGE_IN_QUEUE           the queue is empty          OFFSET_MOVED to 0 (NOT_FOUND if offset 0)
OFFSET_TOO_SMALL              offset < minOffset          OFFSET_MOVED to minOffset
OFFSET_OVERFLOW_ONE           offset == maxOffset         NOT_FOUND (held), offset
OFFSET_OVERFLOW_BADLY         offset > maxOffset          OFFSET_MOVED to maxOffset
OFFSET_FOUND_NULL             no entry where one should   NOT_FOUND, next consume-queue file
FOUND                         records taken               SUCCESS, after the last entry read
NO_MATCHED_MESSAGE            entries read, none matched  RETRY_IMMEDIATELY, after them
MESSAGE_WAS_REMOVING          records gone from the log   RETRY_IMMEDIATELY, after them
OFFSET_RESET                  an admin reset the queue    OFFSET_MOVED to the reset offset
============================  ==========================  =====================

OFFSET_RESET is not the store's: the pull service answers it, without
reading the store, to the group's first pull of a queue after an admin
reset (``triomq.broker.consume.core.offset_reset``).

A pull reads consume-queue entries from its offset, at most
``max_filter_message_size`` bytes of them (20 per entry) or ``maxMsgNums``
entries if more, and takes matching records until ``maxMsgNums``, the
byte cap (``maxMsgBytes`` if sent, at least 100 bytes, at most 128 MiB;
RocketMQ 5 declares the field but its store applies the 128 MiB alone) or
the transfer caps: ``max_transfer_count/bytes_on_message_in_memory`` for a
record within the memory window behind the log's end
(``access_message_in_memory_max_ratio`` percent of the machine's memory),
``..._in_disk`` otherwise. The first record is always taken. When the last
entry read lies further behind the log's end than that window, the answer
suggests a slave (``suggestWhichBrokerId`` 1) if ``slave_read_enable``.

On a slave (``answer(..., is_master=False)``) while its group has a
master: an answer that does not carry records says RETRY_IMMEDIATELY and
points at the master (``suggestWhichBrokerId`` 0), and OFFSET_MOVED becomes
RETRY_IMMEDIATELY (a slave never moves a consumer's offset).
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable, Iterable, Mapping

import attrs

from triomq.broker.consume.core.subscription import (
    EXPRESSION_TAG,
    Subscription,
    SubscriptionRefused,
    parse_subscription,
)
from triomq.broker.core.headers import HeaderError, java_integer
from triomq.errors import TriomqError
from triomq.protocol.route import PERM_READ, TopicConfig

__all__ = [
    "FLAG_CLASS_FILTER",
    "FLAG_COMMIT_OFFSET",
    "FLAG_SUBSCRIPTION",
    "FLAG_SUSPEND",
    "GetMessageStatus",
    "GetResult",
    "PullAnswer",
    "PullHeader",
    "PullLimits",
    "PullRefused",
    "admit",
    "answer",
    "confirmed_max_offset",
    "get_messages",
    "parse_pull_header",
]

#: ``PullSysFlag`` bits. Class filters (bit 8) went with RocketMQ 5's filter
#: servers: the bit is accepted and changes nothing.
FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4
FLAG_CLASS_FILTER = 0x8

#: RocketMQ's ``ResponseCode`` values of the answers.
SUCCESS = 0
SYSTEM_ERROR = 1
NO_PERMISSION = 16
TOPIC_NOT_EXIST = 17
PULL_NOT_FOUND = 19
PULL_RETRY_IMMEDIATELY = 20
PULL_OFFSET_MOVED = 21
SUBSCRIPTION_NOT_EXIST = 24
SUBSCRIPTION_NOT_LATEST = 25
SUBSCRIPTION_GROUP_NOT_EXIST = 26
INVALID_PARAMETER = 29

#: ``MixAll.MASTER_ID``, and ``SubscriptionGroupConfig``'s defaults for the
#: broker a group reads from (``brokerId``) and the one it is sent to when it
#: reads far behind (``whichBrokerWhenConsumeSlowly``).
MASTER_ID = 0
GROUP_BROKER_ID = 0
WHICH_BROKER_WHEN_CONSUME_SLOWLY = 1

#: Bytes of one consume-queue entry, and entries per consume-queue file.
CQ_UNIT_SIZE = 20
CQ_FILE_ENTRIES = 300_000
#: ``DefaultMessageStore``'s bounds of one pull's bytes.
MAX_PULL_MSG_SIZE = 128 * 1024 * 1024
MIN_PULL_MSG_SIZE = 100
#: Most consume-queue entries one pull reads (see ``PullLimits.scan_count``).
MAX_SCAN_ENTRIES = 65536

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
#: Longest client text quoted back in a remark.
_QUOTED = 80


class PullRefused(TriomqError):
    """A pull answered before the store is read; ``code`` and ``remark`` are the answer."""

    def __init__(self, code: int, remark: str) -> None:
        self.code = code
        self.remark = remark
        super().__init__(remark)


class GetMessageStatus(enum.Enum):
    """RocketMQ's ``GetMessageStatus`` (the answer's remark is its name)."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    OFFSET_RESET = "OFFSET_RESET"


_CODES = {
    GetMessageStatus.FOUND: SUCCESS,
    GetMessageStatus.NO_MATCHED_MESSAGE: PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.MESSAGE_WAS_REMOVING: PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.OFFSET_FOUND_NULL: PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_OVERFLOW_ONE: PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_OVERFLOW_BADLY: PULL_OFFSET_MOVED,
    GetMessageStatus.OFFSET_TOO_SMALL: PULL_OFFSET_MOVED,
    GetMessageStatus.OFFSET_RESET: PULL_OFFSET_MOVED,
}


@attrs.frozen
class PullHeader:
    """A ``PullMessageRequestHeader``."""

    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    sys_flag: int = 0
    commit_offset: int = 0
    suspend_timeout_millis: int = 0
    subscription: str | None = None
    sub_version: int = 0
    expression_type: str | None = None
    max_msg_bytes: int | None = None

    @property
    def commits_offset(self) -> bool:
        return bool(self.sys_flag & FLAG_COMMIT_OFFSET)

    @property
    def suspends(self) -> bool:
        return bool(self.sys_flag & FLAG_SUSPEND)

    @property
    def carries_subscription(self) -> bool:
        return bool(self.sys_flag & FLAG_SUBSCRIPTION)


def _required(fields: Mapping[str, str], key: str, bounds: tuple[int, int]) -> int:
    value = java_integer(fields, key, bounds)
    if value is None:
        raise HeaderError(key, "missing")
    return value


def parse_pull_header(fields: Mapping[str, str]) -> PullHeader:
    """The ``PullMessageRequestHeader`` in ``fields``; ``HeaderError`` if it is bad.

    The fields RocketMQ declares not null are required; ``subscription``,
    ``expressionType`` and ``maxMsgBytes`` may be absent.
    """
    for key in ("consumerGroup", "topic"):
        if not fields.get(key):
            raise HeaderError(key, "missing or empty")
    return PullHeader(
        consumer_group=fields["consumerGroup"],
        topic=fields["topic"],
        queue_id=_required(fields, "queueId", _INT32),
        queue_offset=_required(fields, "queueOffset", _INT64),
        max_msg_nums=_required(fields, "maxMsgNums", _INT32),
        sys_flag=_required(fields, "sysFlag", _INT32),
        commit_offset=_required(fields, "commitOffset", _INT64),
        suspend_timeout_millis=_required(fields, "suspendTimeoutMillis", _INT64),
        subscription=fields.get("subscription"),
        sub_version=_required(fields, "subVersion", _INT64),
        expression_type=fields.get("expressionType"),
        max_msg_bytes=java_integer(fields, "maxMsgBytes", _INT32),
    )


def admit(header: PullHeader, topic: TopicConfig | None, *, group_known: bool,
          registered: Callable[[str, str], Subscription | None]) -> Subscription:
    """The subscription to filter by, once the pull passes RocketMQ's checks.

    ``topic`` is the topic's config (None: unknown), ``group_known`` whether
    the consumer group exists (or was created), ``registered(group, topic)``
    the subscription the group's consumers registered by heartbeat.
    ``PullRefused`` otherwise.
    """
    group = header.consumer_group[:_QUOTED]
    name = header.topic[:_QUOTED]
    if not group_known:
        raise PullRefused(SUBSCRIPTION_GROUP_NOT_EXIST,
                          f"subscription group [{group}] does not exist")
    if topic is None:
        raise PullRefused(TOPIC_NOT_EXIST, f"topic[{name}] not exist, apply first please!")
    if not topic.perm & PERM_READ:
        raise PullRefused(NO_PERMISSION, f"the topic[{name}] pulling message is forbidden")
    if not 0 <= header.queue_id < topic.read_queue_nums:
        raise PullRefused(INVALID_PARAMETER,
                          f"queueId[{header.queue_id}] is illegal, topic:[{name}] "
                          f"topicConfig.readQueueNums:[{topic.read_queue_nums}]")
    if header.carries_subscription:
        try:
            return parse_subscription(header.subscription, header.expression_type,
                                      header.sub_version)
        except SubscriptionRefused as exc:
            raise PullRefused(exc.code, exc.remark) from None
    subscription = registered(header.consumer_group, header.topic)
    if subscription is None:
        raise PullRefused(SUBSCRIPTION_NOT_EXIST,
                          f"the consumer's subscription not exist: group [{group}] registered "
                          f"none for topic [{name}] and the pull carries none")
    if subscription.sub_version < header.sub_version:
        raise PullRefused(SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest")
    if subscription.expression_type != EXPRESSION_TAG:
        raise PullRefused(SYSTEM_ERROR, f"The broker does not support consumer to filter "
                                        f"message by {subscription.expression_type[:_QUOTED]}")
    return subscription


@attrs.frozen
class PullLimits:
    """The store's caps on one pull (``MessageStoreConfig``'s names and defaults)."""

    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    max_transfer_count_on_message_in_memory: int = 32
    max_transfer_bytes_on_message_in_disk: int = 64 * 1024
    max_transfer_count_on_message_in_disk: int = 8
    max_filter_message_size: int = 16000
    #: Bytes behind the log's end counted as in memory: the machine's memory
    #: times ``access_message_in_memory_max_ratio`` percent.
    memory_window: int = 1 << 62

    def scan_count(self, max_msg_nums: int) -> int:
        """How many consume-queue entries a pull may read: RocketMQ's filter window,
        at most ``MAX_SCAN_ENTRIES`` (the store hands them over as a list, where
        RocketMQ walks a mapped file lazily)."""
        window = max(self.max_filter_message_size, max_msg_nums * CQ_UNIT_SIZE)
        return min(window // CQ_UNIT_SIZE, MAX_SCAN_ENTRIES)


@attrs.frozen
class GetResult:
    """What the store finds for a pull (``GetMessageResult``)."""

    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    #: ``(physical offset, size)`` of each record taken, in queue order.
    ranges: tuple[tuple[int, int], ...] = ()
    suggest_pulling_from_slave: bool = False

    @property
    def size(self) -> int:
        return sum(size for _, size in self.ranges)


#: A consume-queue entry: ``(queue offset, physical offset, size, tags code)``, as the
#: store's ``QueueEntry`` tuples are.
Entry = tuple[int, int, int, int]


def confirmed_max_offset(min_offset: int, max_offset: int, confirm_offset: int,
                         entry_end: Callable[[int], int]) -> int:
    """The queue's end as consumers see it: past its last record that ends at or
    before ``confirm_offset`` (``entry_end(q)``: where queue offset ``q``'s record
    ends in the commit log).

    What lies beyond the confirm offset is not yet held by every replica the
    master counts, and a failover may cut it: a consumer that read it would
    then stand past the new master's end and skip what is acknowledged there
    next. RocketMQ 5 likewise dispatches records to its consume queues only up
    to the confirm offset (unless ``readUnCommitted``). Records are in queue
    order in the log, so the confirmed ones are a prefix: a binary search.
    """
    if max_offset <= min_offset or entry_end(max_offset - 1) <= confirm_offset:
        return max_offset
    lo, hi = min_offset, max_offset - 1  # the first unconfirmed entry is in [lo, hi]
    while lo < hi:
        mid = (lo + hi) // 2
        if entry_end(mid) <= confirm_offset:
            lo = mid + 1
        else:
            hi = mid
    return lo


def get_messages(header: PullHeader, subscription: Subscription, *, min_offset: int,
                 max_offset: int, entries: Iterable[Entry], log_min_offset: int,
                 log_max_offset: int, limits: PullLimits, correct_offsets: bool = True
                 ) -> GetResult:
    """``DefaultMessageStore.getMessage`` over the queue's offsets and ``entries``.

    ``entries`` are the consume queue's from ``header.queue_offset`` (at
    most ``limits.scan_count(header.max_msg_nums)``, taken only as far as the
    pull goes, so they may be read lazily); ``log_min_offset`` /
    ``log_max_offset`` the commit log's readable range. A slave passes
    ``correct_offsets=False`` (unless ``offset_check_in_slave``): its
    nextBeginOffset for an offset out of range stays the requested one.
    """
    offset = header.queue_offset

    def corrected(new_offset: int) -> int:
        return new_offset if correct_offsets else offset

    if max_offset == 0:
        return GetResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, corrected(0), min_offset,
                         max_offset)
    if offset < min_offset:
        return GetResult(GetMessageStatus.OFFSET_TOO_SMALL, corrected(min_offset), min_offset,
                         max_offset)
    if offset == max_offset:
        return GetResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, min_offset, max_offset)
    if offset > max_offset:
        return GetResult(GetMessageStatus.OFFSET_OVERFLOW_BADLY, corrected(max_offset),
                         min_offset, max_offset)
    scan = iter(entries)
    first = next(scan, None)
    if first is None or first[0] != offset:
        # No entry where the queue's offsets say one is: RocketMQ goes on at
        # the next consume-queue file.
        next_file = (offset // CQ_FILE_ENTRIES + 1) * CQ_FILE_ENTRIES
        return GetResult(GetMessageStatus.OFFSET_FOUND_NULL, corrected(next_file), min_offset,
                         max_offset)
    byte_cap = header.max_msg_bytes if header.max_msg_bytes is not None else MAX_PULL_MSG_SIZE
    byte_cap = min(max(byte_cap, MIN_PULL_MSG_SIZE), MAX_PULL_MSG_SIZE)
    window = max(limits.max_filter_message_size, header.max_msg_nums * CQ_UNIT_SIZE)
    status = GetMessageStatus.NO_MATCHED_MESSAGE
    next_begin = offset
    ranges: list[tuple[int, int]] = []
    total = 0
    last_read = 0
    for queue_offset, physical_offset, size, tags_code in itertools.chain((first,), scan):
        if next_begin >= max_offset or (queue_offset - offset) * CQ_UNIT_SIZE >= window:
            break
        in_memory = log_max_offset - physical_offset <= limits.memory_window
        if _batch_full(size, len(ranges), total, header.max_msg_nums, byte_cap, in_memory,
                       limits) or total >= byte_cap:
            break
        last_read = physical_offset
        next_begin = queue_offset + 1
        if not subscription.matches(tags_code):
            continue
        if physical_offset < log_min_offset:
            if not ranges:
                status = GetMessageStatus.MESSAGE_WAS_REMOVING
            continue
        ranges.append((physical_offset, size))
        total += size
        status = GetMessageStatus.FOUND
    return GetResult(status, next_begin, min_offset, max_offset, tuple(ranges),
                     log_max_offset - last_read > limits.memory_window)


def _batch_full(size: int, count: int, total: int, max_msg_nums: int, byte_cap: int,
                in_memory: bool, limits: PullLimits) -> bool:
    """``isTheBatchFull``: whether a record of ``size`` bytes no longer fits the pull."""
    if total == 0 or count == 0:
        return False
    if count + 1 > max_msg_nums or total + size > byte_cap:
        return True
    if in_memory:
        return (total + size > limits.max_transfer_bytes_on_message_in_memory
                or count > limits.max_transfer_count_on_message_in_memory - 1)
    return (total + size > limits.max_transfer_bytes_on_message_in_disk
            or count > limits.max_transfer_count_on_message_in_disk - 1)


@attrs.frozen
class PullAnswer:
    """The response to a pull: its code, remark and header fields, the records to
    send, and whether to hold it instead (``hold``: a long poll)."""

    code: int
    remark: str
    fields: Mapping[str, str]
    ranges: tuple[tuple[int, int], ...] = ()
    hold: bool = False


def answer(result: GetResult, header: PullHeader, *, topic_sys_flag: int = 0,
           is_master: bool = True, master_online: bool = True,
           slave_read_enable: bool = False, offset_check_in_slave: bool = False,
           allow_suspend: bool = True) -> PullAnswer:
    """The response for ``result`` (``composeResponseHeader`` and the result handler).

    ``master_online``: on a slave, whether its group has a master (RocketMQ:
    the smallest broker id in the group is 0). ``allow_suspend`` is False when
    a held pull is run again: it is answered whatever it finds.
    """
    status = result.status
    if status is GetMessageStatus.NO_MESSAGE_IN_QUEUE:
        code = PULL_OFFSET_MOVED if header.queue_offset != 0 else PULL_NOT_FOUND
    else:
        code = _CODES[status]
    if slave_read_enable:
        suggest = (WHICH_BROKER_WHEN_CONSUME_SLOWLY if result.suggest_pulling_from_slave
                   else GROUP_BROKER_ID)
    else:
        suggest = MASTER_ID
    if not is_master and not result.suggest_pulling_from_slave and master_online:
        suggest = MASTER_ID
        if status is not GetMessageStatus.FOUND:
            code = PULL_RETRY_IMMEDIATELY
    if code == PULL_OFFSET_MOVED and not is_master and not offset_check_in_slave:
        suggest = GROUP_BROKER_ID
        code = PULL_RETRY_IMMEDIATELY
    fields = {
        "suggestWhichBrokerId": str(suggest),
        "nextBeginOffset": str(result.next_begin_offset),
        "minOffset": str(result.min_offset),
        "maxOffset": str(result.max_offset),
        "topicSysFlag": str(topic_sys_flag),
        "groupSysFlag": "0",
    }
    hold = code == PULL_NOT_FOUND and allow_suspend and header.suspends
    return PullAnswer(code, status.value, fields,
                      result.ranges if code == SUCCESS else (), hold)

