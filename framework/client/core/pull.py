"""PULL_MESSAGE as a consumer speaks it: the request, the answer, what comes next. Pure.

- ``pull_header``: RocketMQ's ``PullMessageRequestHeader``. The sysFlag
  asks the broker to hold the request until a message comes
  (``FLAG_SUSPEND``, at most ``suspend_ms``: RocketMQ's
  brokerSuspendMaxTimeMillis, 15 s), to store the consumer's offset as it
  serves it (``FLAG_COMMIT_OFFSET``, with ``commitOffset``), and whether the
  subscription rides along (``FLAG_SUBSCRIPTION``; else the broker uses the
  one of the consumer's last HEART_BEAT).
- ``read_pull_response``: the answer as a ``PullResult`` (RocketMQ's
  ``processPullResponse`` then ``processPullResult``): SUCCESS is FOUND,
  PULL_NOT_FOUND is NO_NEW_MSG, PULL_RETRY_IMMEDIATELY is NO_MATCHED_MSG,
  PULL_OFFSET_MOVED is OFFSET_ILLEGAL; any other code raises
  ``PullError``. Found messages are kept only if their tag is subscribed
  (the broker filters by tag hash code, which may collide) and carry the
  queue's ``MIN_OFFSET``/``MAX_OFFSET`` properties.
- ``PullOutcome.of``: what the pull loop does with a result: every status
  moves on to ``nextBeginOffset``; with nothing new, an idle queue's offset
  is moved there too (its skipped offsets were filtered out); an illegal
  offset drops the queue, whose offset becomes ``nextBeginOffset``.
- ``PullThresholds.holds_back``: flow control, pausing a queue's pulls
  while it holds too many unconsumed messages or bytes, or too wide a span.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

import attrs

from triomq.client.core.codes import ResponseCode as Code
from triomq.client.core.codes import code_name
from triomq.client.core.message import (
    PROPERTY_MAX_OFFSET,
    PROPERTY_MIN_OFFSET,
    MessageExt,
    MessageQueue,
    decode_messages,
)
from triomq.client.core.process_queue import ProcessQueue
from triomq.errors import TriomqError
from triomq.protocol.heartbeat import EXPRESSION_TAG, SubscriptionData

__all__ = [
    "BROKER_SUSPEND_MAX_MS",
    "CONSUMER_TIMEOUT_WHEN_SUSPEND_MS",
    "FLAG_COMMIT_OFFSET",
    "FLAG_SUBSCRIPTION",
    "FLAG_SUSPEND",
    "PullError",
    "PullOutcome",
    "PullResult",
    "PullStatus",
    "PullThresholds",
    "pull_header",
    "read_pull_response",
]

#: ``PullSysFlag`` bits.
FLAG_COMMIT_OFFSET = 1
FLAG_SUSPEND = 2
FLAG_SUBSCRIPTION = 4
#: How long a broker may hold a long poll (brokerSuspendMaxTimeMillis).
BROKER_SUSPEND_MAX_MS = 15_000
#: How long the client waits for a held pull's answer (consumerTimeoutMillisWhenSuspend).
CONSUMER_TIMEOUT_WHEN_SUSPEND_MS = 30_000


class PullStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


_STATUS: Mapping[int, PullStatus] = {
    Code.SUCCESS: PullStatus.FOUND, Code.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    Code.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    Code.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL}


class PullError(TriomqError):
    """The broker refused a pull; ``code`` says why."""

    def __init__(self, code: int, remark: str | None) -> None:
        self.code = code
        self.remark = remark
        super().__init__(f"pull refused: {code_name(code)}: {remark or 'no remark'}")


def pull_header(group: str, queue: MessageQueue, offset: int, max_nums: int,
                subscription: SubscriptionData, *, commit_offset: int | None = None,
                suspend_ms: int | None = BROKER_SUSPEND_MAX_MS,
                with_subscription: bool = False) -> dict[str, str]:
    """The ``extFields`` of a pull of ``queue`` from ``offset``.

    ``commit_offset``: the consumer's offset for the broker to store;
    ``suspend_ms``: how long the broker may hold the pull (``None``: answer at
    once); ``with_subscription``: send the expression rather than rely on the
    heartbeat's.
    """
    sys_flag = ((FLAG_COMMIT_OFFSET if commit_offset is not None else 0)
                | (FLAG_SUSPEND if suspend_ms is not None else 0)
                | (FLAG_SUBSCRIPTION if with_subscription else 0))
    fields = {"consumerGroup": group, "topic": queue.topic, "queueId": str(queue.queue_id),
              "queueOffset": str(offset), "maxMsgNums": str(max_nums), "sysFlag": str(sys_flag),
              "commitOffset": str(commit_offset if commit_offset is not None else 0),
              "suspendTimeoutMillis": str(suspend_ms or 0),
              "subVersion": str(subscription.sub_version),
              "expressionType": EXPRESSION_TAG, "bname": queue.broker_name}
    if with_subscription:
        fields["subscription"] = subscription.sub_string
    return fields


@attrs.frozen
class PullResult:
    """A pull's answer: status, offsets, the wanted messages, the broker to pull from next."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: tuple[MessageExt, ...] = ()
    suggest_which_broker_id: int = 0


def _long(fields: Mapping[str, str], key: str) -> int:
    try:
        return int(fields[key])
    except (KeyError, ValueError):
        raise PullError(Code.SYSTEM_ERROR, f"the answer's {key} is missing or not a number"
                        ) from None


def read_pull_response(code: int, remark: str | None, fields: Mapping[str, str], body: bytes,
                       queue: MessageQueue, subscription: SubscriptionData) -> PullResult:
    """The ``PullResult`` of an answer; ``PullError`` for a refusal.

    Raises ``MessageDecodeError`` if the body holds no messages it can read.
    """
    status = _STATUS.get(code)
    if status is None:
        raise PullError(code, remark)
    min_offset, max_offset = _long(fields, "minOffset"), _long(fields, "maxOffset")
    messages: tuple[MessageExt, ...] = ()
    if status is PullStatus.FOUND:
        bounds = {PROPERTY_MIN_OFFSET: str(min_offset), PROPERTY_MAX_OFFSET: str(max_offset)}
        messages = tuple(m for m in decode_messages(body, queue.broker_name, bounds)
                         if subscription.matches(m.tags))
    return PullResult(status, _long(fields, "nextBeginOffset"), min_offset, max_offset,
                      messages, int(fields.get("suggestWhichBrokerId", "0") or 0))


@attrs.frozen
class PullOutcome:
    """What the pull loop of one queue does after a result."""

    #: Where the next pull starts.
    next_offset: int
    #: Messages to hold and consume.
    messages: tuple[MessageExt, ...]
    #: Store ``next_offset`` as the consumer's offset if the queue holds nothing
    #: (RocketMQ's correctTagsOffset: the offsets passed were none of ours).
    correct_offset: bool = False
    #: The offset was out of the queue's range: drop the queue and store
    #: ``next_offset`` as its offset; a later rebalance takes it up again.
    offset_moved: bool = False

    @classmethod
    def of(cls, result: PullResult) -> PullOutcome:
        if result.status is PullStatus.FOUND:
            return cls(result.next_begin_offset, result.messages)
        if result.status is PullStatus.OFFSET_ILLEGAL:
            return cls(result.next_begin_offset, (), offset_moved=True)
        return cls(result.next_begin_offset, (), correct_offset=True)


@attrs.frozen
class PullThresholds:
    """Flow control of one queue (RocketMQ's defaults)."""

    #: pullThresholdForQueue: unconsumed messages held.
    messages: int = 1000
    #: pullThresholdSizeForQueue, in MiB.
    size_mib: int = 100
    #: consumeConcurrentlyMaxSpan: highest minus lowest offset held (concurrent only).
    max_span: int = 2000

    def holds_back(self, queue: ProcessQueue, *, orderly: bool = False) -> bool:
        """Whether the next pull waits for the listener to catch up."""
        return (len(queue) > self.messages or queue.size > self.size_mib * 1024 * 1024
                or (not orderly and queue.span > self.max_span))
