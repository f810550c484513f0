"""The broker's pulls, PULL_MESSAGE 11 and LITE_PULL_MESSAGE 361, as one flow. Pure.

The broker's trio driver (``pull_service``) and the cluster simulation's
brokers (``testing.clustersim_pulls``) pump the same ``BrokerPullFlow``: they
feed it what happens, with ``now`` and the broker's ``PullRole`` at that
moment, and do what it answers:

- ``receive`` (a request came): a ``Refuse``, or a ``LookUp`` of the store.
  In order, as RocketMQ's ``PullMessageProcessor``: a lite pull while
  ``lite_pull_message_enable`` is off (NO_PERMISSION); the header
  (INVALID_PARAMETER naming the field); a slave without
  ``slave_read_enable`` while its group has a master (SYSTEM_BUSY, as
  RocketMQ's ``rejectRequest``); the group, topic, queue and subscription
  (``pull.admit``). Then the group's first pull of a queue after an admin
  reset is looked up as OFFSET_MOVED to the reset offset (remark
  OFFSET_RESET, as RocketMQ 5), its commit flag not followed.
- ``looked_up`` (the driver ran the ``LookUp`` on its store): the first
  look-up's commit flag gives a ``CommitOffset`` of the consumer's offset (on any
  role, as RocketMQ 5); an answer that finds nothing new with the suspend
  flag is held (``Held``: for ``suspendTimeoutMillis``, or
  ``short_polling_time_mills`` without ``long_polling_enable``); any other
  is a ``Respond`` to send.
- a held pull is let go when its queue grows past its offset (``appended``,
  the queues' ends read from the store up to the confirm offset), when its
  time runs out (``timer``, due at ``next_deadline()``), or when the broker's
  role changes (``role_changed``, RocketMQ's ``notifyMasterOnline``); each
  one let go is a ``LookUp`` again, answered whatever it finds
  (PULL_NOT_FOUND when its time ran out with nothing new). A pull whose
  consumer went away is ``gone``.

``T`` is how the driver knows a pull (its reply slot, or who asked and the
request id); it comes back on every effect of that pull. Times are in the
driver's unit: ``BrokerPullSettings.millis_per_unit`` milliseconds each.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Generic, Protocol, TypeVar

import attrs

from triomq.broker.consume.core.pull import (
    PullAnswer,
    PullHeader,
    PullLimits,
    PullRefused,
    admit,
    parse_pull_header,
)
from triomq.broker.consume.core.pull_hold import Hold, HoldTable
from triomq.broker.consume.core.pull_lookup import (
    QueueStore,
    confirmed_queue_max,
    look_up,
    reset_answer,
    slave_refusal,
)
from triomq.broker.consume.core.subscription import Subscription
from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.broker.core.headers import HeaderError
from triomq.protocol.route import TopicConfig

__all__ = [
    "BrokerPullFlow",
    "BrokerPullSettings",
    "CommitOffset",
    "Held",
    "LookUp",
    "PullEffect",
    "PullRole",
    "PullTables",
    "Refuse",
    "Respond",
]

T = TypeVar("T")


@attrs.frozen
class BrokerPullSettings:
    """A broker's settings for pulls (``BrokerConfig``'s names)."""

    broker_name: str
    limits: PullLimits = PullLimits()
    lite_pull_message_enable: bool = True
    slave_read_enable: bool = False
    offset_check_in_slave: bool = False
    long_polling_enable: bool = True
    short_polling_time_mills: int = 1000
    #: Milliseconds in one unit of the driver's ``now`` (1000: it counts seconds).
    millis_per_unit: int = 1


@attrs.frozen
class PullRole:
    """The broker as a pull sees it at one moment."""

    is_master: bool
    #: On a slave: whether its group has a master.
    master_online: bool
    #: Consumers read the log up to here (what every replica the master counts holds).
    confirm_offset: int


class PullTables(Protocol):
    """The broker's tables a pull is checked against (in memory; read when needed)."""

    def topic(self, name: str) -> TopicConfig | None:
        """The topic's config; None: unknown."""
        ...

    def group_known(self, group: str) -> bool:
        """Whether the consumer group exists (or is created now)."""
        ...

    def registered(self, group: str, topic: str) -> Subscription | None:
        """The subscription the group's consumers registered by heartbeat."""
        ...

    def take_reset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The queue's pending admin reset for the group, no longer pending."""
        ...


@attrs.frozen
class Refuse(Generic[T]):
    """Answer the pull with ``code`` and ``remark`` alone."""

    pull: T
    code: int
    remark: str


@attrs.frozen(eq=False)
class LookUp(Generic[T]):
    """Look the pull up in the store (``run``); then ``looked_up`` with its answer.

    ``first``: the look-up on arrival (it may be held, its commit flag is followed);
    ``reset_offset``: an admin reset's offset to answer OFFSET_MOVED to instead.
    """

    pull: T
    header: PullHeader
    subscription: Subscription
    role: PullRole
    topic: TopicConfig | None
    settings: BrokerPullSettings
    first: bool
    reset_offset: int | None = None

    def run(self, store: QueueStore) -> PullAnswer:
        """The answer from ``store`` now."""
        role, settings = self.role, self.settings
        if self.reset_offset is not None:
            return reset_answer(store, self.header, self.reset_offset, topic=self.topic,
                                confirm_offset=role.confirm_offset, is_master=role.is_master,
                                master_online=role.master_online,
                                slave_read_enable=settings.slave_read_enable,
                                offset_check_in_slave=settings.offset_check_in_slave)
        return look_up(store, self.header, self.subscription, limits=settings.limits,
                       topic=self.topic, confirm_offset=role.confirm_offset,
                       is_master=role.is_master, master_online=role.master_online,
                       slave_read_enable=settings.slave_read_enable,
                       offset_check_in_slave=settings.offset_check_in_slave,
                       allow_suspend=self.first)


@attrs.frozen
class CommitOffset:
    """Store ``offset`` as the group's consumed offset of the queue."""

    group: str
    topic: str
    queue_id: int
    offset: int


@attrs.frozen
class Held(Generic[T]):
    """The pull is held until its queue grows past ``offset`` or until ``deadline``."""

    pull: T
    topic: str
    queue_id: int
    offset: int
    deadline: float


@attrs.frozen(eq=False)
class Respond(Generic[T]):
    """Send ``answer`` (its records read from the log) to the pull."""

    pull: T
    header: PullHeader
    answer: PullAnswer


PullEffect = Refuse[T] | LookUp[T] | CommitOffset | Held[T] | Respond[T]

_PULL_CODES = frozenset({RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE})


@attrs.frozen(eq=False)
class _Waiting(Generic[T]):
    """A held pull, as it is looked up again."""

    pull: T
    header: PullHeader
    subscription: Subscription


class BrokerPullFlow(Generic[T]):
    """One broker's pulls and held pulls; see the module."""

    def __init__(self, settings: BrokerPullSettings, tables: PullTables) -> None:
        self.settings = settings
        self.tables = tables
        #: The held pulls (``len`` is how many).
        self.holds: HoldTable[_Waiting[T]] = HoldTable()
        # By pull, for ``gone``.
        self._held: dict[T, Hold[_Waiting[T]]] = {}

    # -- a request -----------------------------------------------------------------

    def receive(self, pull: T, code: int, fields: Mapping[str, str] | None, now: float,
                role: PullRole) -> Refuse[T] | LookUp[T]:
        """A PULL_MESSAGE or LITE_PULL_MESSAGE request with header ``fields`` came."""
        settings = self.settings
        if code not in _PULL_CODES:
            raise ValueError(f"request code {code} is not a pull")
        if code == RequestCode.LITE_PULL_MESSAGE and not settings.lite_pull_message_enable:
            return Refuse(pull, ResponseCode.NO_PERMISSION,
                          f"LITE_PULL_MESSAGE: the broker {settings.broker_name} does not "
                          "serve lite pull consumers (lite_pull_message_enable is off)")
        try:
            header = parse_pull_header(fields or {})
        except HeaderError as exc:
            return Refuse(pull, ResponseCode.INVALID_PARAMETER, str(exc))
        tables = self.tables
        try:
            refusal = slave_refusal(settings.broker_name, is_master=role.is_master,
                                    slave_read_enable=settings.slave_read_enable,
                                    master_online=role.master_online)
            if refusal is not None:
                raise refusal
            subscription = admit(header, tables.topic(header.topic),
                                 group_known=tables.group_known(header.consumer_group),
                                 registered=tables.registered)
        except PullRefused as exc:
            return Refuse(pull, exc.code, exc.remark)
        reset = tables.take_reset(header.consumer_group, header.topic, header.queue_id)
        return self._look_up(pull, header, subscription, role, first=True, reset=reset)

    def _look_up(self, pull: T, header: PullHeader, subscription: Subscription,
                 role: PullRole, *, first: bool, reset: int | None = None) -> LookUp[T]:
        return LookUp(pull, header, subscription, role, self.tables.topic(header.topic),
                      self.settings, first, reset)

    def looked_up(self, lookup: LookUp[T], answer: PullAnswer, now: float
                  ) -> list[CommitOffset | Held[T] | Respond[T]]:
        """``lookup`` ran: what it found is answered, or the pull is held."""
        header, pull = lookup.header, lookup.pull
        if lookup.reset_offset is not None:
            return [Respond(pull, header, answer)]
        effects: list[CommitOffset | Held[T] | Respond[T]] = []
        if lookup.first and header.commits_offset:
            effects.append(CommitOffset(header.consumer_group, header.topic, header.queue_id,
                                  header.commit_offset))
        if answer.hold:
            effects.append(self._hold(pull, header, lookup.subscription, now))
        else:
            effects.append(Respond(pull, header, answer))
        return effects

    def _hold(self, pull: T, header: PullHeader, subscription: Subscription, now: float
              ) -> Held[T]:
        settings = self.settings
        timeout_ms = (header.suspend_timeout_millis if settings.long_polling_enable
                      else settings.short_polling_time_mills)
        hold = self.holds.hold(header.topic, header.queue_id, header.queue_offset, now,
                               max(0, timeout_ms) / settings.millis_per_unit,
                               _Waiting(pull, header, subscription))
        self._held[pull] = hold
        return Held(pull, header.topic, header.queue_id, header.queue_offset, hold.deadline)

    def gone(self, pull: T) -> None:
        """The pull's consumer went away: it is held no longer (no error if it is not)."""
        hold = self._held.pop(pull, None)
        if hold is not None:
            self.holds.drop(hold)

    # -- wake-ups of the held pulls ------------------------------------------------------

    def next_deadline(self) -> float | None:
        """When ``timer`` is due next; None with no pull held."""
        return self.holds.next_deadline()

    def timer(self, now: float, role: PullRole) -> list[LookUp[T]]:
        """Time passed: the pulls whose time ran out, to look up again."""
        return self._again(self.holds.tick(now), role)

    def appended(self, store: QueueStore, role: PullRole) -> list[LookUp[T]]:
        """Records landed in ``store``: the pulls of queues that grew, to look up again."""
        released: list[Hold[_Waiting[T]]] = []
        for topic, queue_id in self.holds.queues():
            end = confirmed_queue_max(store, topic, queue_id, role.confirm_offset)
            released += self.holds.arrived(topic, queue_id, end)
        return self._again(released, role)

    def role_changed(self, role: PullRole) -> list[LookUp[T]]:
        """The broker's role changed: every held pull, to look up again (a slave's
        consumers then follow its suggestion)."""
        return self._again(self.holds.release_all(), role)

    def _again(self, released: list[Hold[_Waiting[T]]], role: PullRole) -> list[LookUp[T]]:
        lookups = []
        for hold in released:
            waiting = hold.payload
            if self._held.get(waiting.pull) is hold:
                del self._held[waiting.pull]
            lookups.append(self._look_up(waiting.pull, waiting.header, waiting.subscription,
                                         role, first=False))
        return lookups
