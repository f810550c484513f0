"""One held queue's pulls, from finding where to start to being let go. Pure.

A consumer runs one ``PullFlow`` per queue it holds (``ConsumerBase``'s trio
driver, and the cluster simulation's consumers, pump the same object). The
driver asks ``poll(now, view)`` what to do, does it, and feeds the outcome
back with ``now``; ``view`` is what the consumer knows at that moment (the
group's addresses, the subscription, whether the listener holds the queue
back). Times are in whatever unit the driver's ``now`` is; the settings'
delays are in the same unit.

- **Start**: the group's stored offset (QUERY_CONSUMER_OFFSET); without one,
  where ``consume_from_where`` says (``consume_from.start_offset``), which
  may need GET_MAX_OFFSET or SEARCH_OFFSET_BY_TIMESTAMP. A failed look-up is
  tried again after ``pull_delay_on_exception``.
- **Pulls**: one long poll at a time, to the replica ``queue_pull.subscribe_broker``
  picks (the suggested one, else the master), carrying the consumed offset
  when it goes to the master and ``commit_offset_on_pull`` is on. No pull
  while flow control or a pause holds the queue back (``flow_control_delay``),
  while an orderly consumer's lock is not valid, or while the group has no
  address (``pull_delay_on_exception``).
- **Answers** go through ``QueuePull.answered``: messages to deliver, an
  offset to skip to, or the offset moved (the queue is to be dropped).
- **Failures**: a refusal other than a master's going away waits
  ``pull_delay_on_exception``. No answer, or a refusal saying the broker is
  not (or no longer) master, fetches the routes at once and again with a
  backoff (``failover_pause``) until they name the group's replicas
  otherwise (a new master after a failover) or ``pull_delay_on_exception``
  has passed; then the next pull goes out at once.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from triomq.client.core.codes import ResponseCode as Code
from triomq.client.core.consume_from import ConsumeFromWhere, Lookup, start_offset
from triomq.client.core.failover_pause import FIRST_PAUSE, LONGEST_PAUSE, next_pause
from triomq.client.core.message import MessageDecodeError, MessageQueue
from triomq.client.core.pull import (
    BROKER_SUSPEND_MAX_MS,
    PullError,
    PullThresholds,
    pull_header,
    read_pull_response,
)
from triomq.client.core.queue_pull import (
    ConsumedOffsets,
    Dispatch,
    OffsetMoved,
    QueuePull,
    SkipTo,
    subscribe_broker,
)
from triomq.protocol.heartbeat import SubscriptionData
from triomq.protocol.route import MASTER_ID

__all__ = [
    "FetchRoutes",
    "PullAction",
    "PullFlow",
    "PullSettings",
    "PullView",
    "QueryMaxOffset",
    "QueryStoredOffset",
    "SearchOffset",
    "SendPull",
    "Wait",
]

#: Pull refusals of a broker that is not (or no longer) its group's master: a slave
#: without slave_read_enable, one stepping down.
MASTER_GONE_CODES = frozenset({Code.SYSTEM_BUSY, Code.SERVICE_NOT_AVAILABLE})


@attrs.frozen
class PullSettings:
    """A consumer's settings for its queues' pulls (RocketMQ's names in the comments)."""

    group: str
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    #: CONSUME_FROM_TIMESTAMP's time, ms since the epoch (consumeTimestamp).
    consume_timestamp_ms: int = 0
    pull_batch_size: int = 32  # pullBatchSize
    thresholds: PullThresholds = attrs.field(factory=PullThresholds)
    orderly: bool = False
    #: Whether pulls carry the subscription (else the broker uses the heartbeat's).
    with_subscription: bool = False
    #: Whether pulls to a master carry the consumed offset (commitOffsetEnable).
    commit_offset_on_pull: bool = True
    suspend_ms: int = BROKER_SUSPEND_MAX_MS  # brokerSuspendMaxTimeMillis
    #: How long a pull's answer may take (consumerTimeoutMillisWhenSuspend), driver's unit.
    pull_timeout: float = 30.0
    pull_delay_on_exception: float = 0.5  # pullTimeDelayMillsWhenException
    flow_control_delay: float = 0.05
    #: The driver's units of time in a second: 1 for trio's clock, 1000 for milliseconds
    #: (the route fetches' pauses, ``failover_pause``, are in seconds).
    per_second: float = 1.0


@attrs.frozen
class PullView:
    """What the consumer knows when the flow is polled."""

    #: The queue's broker group: broker id -> address, as the last route named it.
    addresses: Mapping[int, str]
    #: The queue's topic's subscription; None once unsubscribed.
    subscription: SubscriptionData | None
    #: Whether the consumer pauses the queue (a lite pull consumer's ``pause``).
    paused: bool = False
    #: An orderly consumer's lock on the queue is valid now.
    locked: bool = True


@attrs.frozen
class QueryStoredOffset:
    """QUERY_CONSUMER_OFFSET (``setZeroIfNotFound`` unless ``zero_if_not_found``); then
    ``stored`` with the offset (None: the group has none) or ``failed``."""

    zero_if_not_found: bool


@attrs.frozen
class QueryMaxOffset:
    """GET_MAX_OFFSET; then ``looked_up`` or ``failed``."""


@attrs.frozen
class SearchOffset:
    """SEARCH_OFFSET_BY_TIMESTAMP for ``timestamp_ms``; then ``looked_up`` or ``failed``."""

    timestamp_ms: int


@attrs.frozen
class SendPull:
    """PULL_MESSAGE to ``address`` with ``fields``, waiting ``timeout`` at most; then
    ``answered`` or ``unanswered``. ``commit_offset`` is the offset it carries, if any."""

    address: str
    fields: dict[str, str]
    timeout: float
    commit_offset: int | None


@attrs.frozen
class FetchRoutes:
    """Fetch the routes from the name servers; then ``routes_fetched``."""


@attrs.frozen
class Wait:
    """Nothing to do before ``until`` (the driver may poll sooner when woken)."""

    until: float


PullAction = QueryStoredOffset | QueryMaxOffset | SearchOffset | SendPull | FetchRoutes | Wait


class PullFlow:
    """The pulls of one queue this consumer holds; see the module.

    ``offsets``: the consumer's offsets in memory (a stored offset found at the
    start is put there; pulls to the master carry what is there).
    """

    def __init__(self, queue: MessageQueue, settings: PullSettings,
                 offsets: ConsumedOffsets) -> None:
        self.pull = QueuePull(queue)
        self.settings = settings
        self._offsets = offsets
        self._retry_at = -float("inf")
        self._lookup: Lookup | None = None
        # While waiting out a master's going away: the addresses the pull failed with,
        # when the wait ends at the latest, and the next pause between route fetches.
        self._failed_with: Mapping[int, str] | None = None
        self._reroute_until = 0.0
        self._pause = 0.0
        # The subscription the pull in flight was sent with (its answer is filtered by it).
        self._pulling_with: SubscriptionData | None = None
        #: Why the last pull was refused, or could not be read (None after one that was).
        self.last_error: Exception | None = None

    @property
    def queue(self) -> MessageQueue:
        return self.pull.queue

    # -- what next -------------------------------------------------------------------

    def poll(self, now: float, view: PullView) -> PullAction:
        """What to do now."""
        if now < self._retry_at:
            return Wait(self._retry_at)
        if self._failed_with is not None:
            return FetchRoutes()
        if self.pull.next_offset < 0:
            return self._find_start()
        settings, process = self.settings, self.pull.process
        if (settings.thresholds.holds_back(process, orderly=settings.orderly)
                or view.paused):
            return self._wait(now, settings.flow_control_delay)
        address = subscribe_broker(view.addresses, self.pull.broker_id)
        if (settings.orderly and not view.locked) or view.subscription is None \
                or address is None:
            return self._wait(now, settings.pull_delay_on_exception)
        to_master = address == view.addresses.get(MASTER_ID)
        commit = self.pull.commit_offset(
            self._offsets, to_master=to_master and settings.commit_offset_on_pull)
        fields = pull_header(settings.group, self.queue, self.pull.next_offset,
                             settings.pull_batch_size, view.subscription,
                             commit_offset=commit, suspend_ms=settings.suspend_ms,
                             with_subscription=settings.with_subscription)
        self._pulling_with = view.subscription
        return SendPull(address, fields, settings.pull_timeout, commit)

    def _find_start(self) -> PullAction:
        if self._lookup is Lookup.MAX_OFFSET:
            return QueryMaxOffset()
        if self._lookup is Lookup.BY_TIMESTAMP:
            return SearchOffset(self.settings.consume_timestamp_ms)
        # A timestamp means what it says even on a queue that never lost a message
        # (RocketMQ's client lets the broker answer 0 there, as for the others).
        by_time = self.settings.consume_from_where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP
        return QueryStoredOffset(zero_if_not_found=not by_time)

    def _wait(self, now: float, delay: float) -> Wait:
        self._retry_at = now + delay
        return Wait(self._retry_at)

    # -- outcomes ----------------------------------------------------------------------

    def stored(self, offset: int | None, now: float) -> None:
        """The group's stored offset (None: it has none)."""
        if offset is not None and offset >= 0:
            self._offsets.update(self.queue, offset)
        where = start_offset(self.settings.consume_from_where, offset)
        if isinstance(where, Lookup):
            self._lookup = where
        else:
            self.pull.next_offset = where

    def looked_up(self, offset: int, now: float) -> None:
        """The queue's end, or the offset of the consumer's timestamp."""
        self._lookup = None
        self.pull.next_offset = offset

    def failed(self, now: float) -> None:
        """A look-up of the start failed: tried again after a delay."""
        self._wait(now, self.settings.pull_delay_on_exception)

    def answered(self, code: int, remark: str | None, fields: Mapping[str, str],
                 body: bytes, addresses: Mapping[int, str],
                 now: float) -> Dispatch | SkipTo | OffsetMoved | None:
        """The broker answered the last ``SendPull``: what the consumer does with it
        (None: nothing; a refusal is handled here, ``last_error`` says what it was).
        ``addresses``: the group's now."""
        subscription = self._pulling_with
        assert subscription is not None, "an answer without a SendPull"
        try:
            result = read_pull_response(code, remark, fields, body, self.queue, subscription)
        except PullError as exc:
            self.last_error = exc
            if exc.code in MASTER_GONE_CODES:
                self._reroute(addresses, now)
            else:
                self.failed(now)
            return None
        except MessageDecodeError as exc:
            self.last_error = exc
            self.failed(now)
            return None
        self.last_error = None
        return self.pull.answered(result)

    def unanswered(self, addresses: Mapping[int, str], now: float) -> None:
        """The last ``SendPull`` got no answer: the broker may be gone."""
        self._reroute(addresses, now)

    def _reroute(self, addresses: Mapping[int, str], now: float) -> None:
        self._failed_with = dict(addresses)
        self._reroute_until = now + self.settings.pull_delay_on_exception
        self._pause = FIRST_PAUSE * self.settings.per_second

    def routes_fetched(self, addresses: Mapping[int, str], now: float) -> None:
        """The routes were fetched (or the fetch failed); ``addresses``: the group's now."""
        if self._failed_with is None:
            return
        if dict(addresses) != self._failed_with or now >= self._reroute_until:
            self._failed_with = None
            return
        self._retry_at = now + min(self._pause, self._reroute_until - now)
        self._pause = next_pause(self._pause, LONGEST_PAUSE * self.settings.per_second)
