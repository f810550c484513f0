"""PULL_MESSAGE 11 at run time: the handler and the long-poll driver.

LITE_PULL_MESSAGE 361, which RocketMQ 5's ``DefaultLitePullConsumer``
sends, is the same pull (RocketMQ serves both with one processor), refused
with NO_PERMISSION when ``lite_pull_message_enable`` is off.

The pull's sequence is one pure flow (``triomq.broker.consume.core.pull_flow``, which
the cluster simulation's brokers run too); this module feeds it the
requests, the appends, the role changes and the time, runs its look-ups on
the commit log, reads the records of its answers and sends them:

- a pull is admitted, looked up and answered at once, its commit flag
  storing the consumer's offset (``ConsumerOffsetService.commit``; on any
  role, as RocketMQ 5 does);
- the group's first pull of a queue after an admin reset
  (INVOKE_BROKER_TO_RESET_OFFSET) is answered PULL_OFFSET_MOVED to the
  reset offset instead, remark OFFSET_RESET, as RocketMQ 5 answers it; its
  commit flag is not followed (RocketMQ's is, storing the position from
  before the reset until the consumer commits the new one);
- a pull that finds nothing new with the suspend flag is held (for its
  ``suspendTimeoutMillis``, or ``short_polling_time_mills`` without
  ``long_polling_enable``), then looked up once more and answered with
  whatever it finds: PULL_NOT_FOUND when its time ran out with nothing new.
  ``appended`` (called by the ``ReplicasManager`` after a master's put, a
  slave's ack to it and a slave's replicated append) wakes the driver, which
  releases the holds of every queue that grew; a role change releases them
  all.

Consumers read a queue only as far as the confirm offset
(``confirmed_queue_max``): records the replicas the master counts all
hold, which a failover keeps.

A slave serves pulls with ``slave_read_enable``, and without it while its
group has no master (``master_online`` false: none known, or the slave acts
for it), so consumers read from it then; otherwise it refuses them with SYSTEM_BUSY, as RocketMQ's
``rejectRequest`` does.
"""

from __future__ import annotations

import errno
import logging
import math
import os
from collections.abc import Callable, Iterable, Sized

import trio

from triomq.broker.admin.core.store_stats import StoreStats
from triomq.broker.components import ComponentView
from triomq.broker.config import BrokerConfig
from triomq.broker.consume.core.pull import PullLimits
from triomq.broker.consume.core.pull_flow import (
    BrokerPullFlow,
    BrokerPullSettings,
    CommitOffset,
    Held,
    LookUp,
    PullEffect,
    PullRole,
    Refuse,
    Respond,
)
from triomq.broker.consume.core.pull_lookup import confirmed_queue_max
from triomq.broker.consume.core.subscription import EXPRESSION_TAG, SUB_ALL, Subscription
from triomq.broker.consume.offset_service import ConsumerOffsetService
from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.broker.metadata.topics import TopicService
from triomq.protocol.heartbeat import SubscriptionData
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.route import TopicConfig
from triomq.rpc import RpcConnection, RpcServer
from triomq.store import CommitLog, StoreError

__all__ = [
    "PullService",
    "confirmed_queue_max",
    "memory_window",
    "pull_limits",
    "registered_subscription",
]

log = logging.getLogger("triomq.broker")


def memory_window(config: BrokerConfig) -> int:
    """Bytes behind the log's end a pull counts as in memory: the machine's memory times
    ``access_message_in_memory_max_ratio`` percent."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        # No figure on this system: RocketMQ's fallback is 24 GiB.
        total = 24 * 1024**3
    return total * config.access_message_in_memory_max_ratio // 100


def pull_limits(config: BrokerConfig, window: int) -> PullLimits:
    """The store's caps on one pull, from ``config``."""
    return PullLimits(
        max_transfer_bytes_on_message_in_memory=config.max_transfer_bytes_on_message_in_memory,
        max_transfer_count_on_message_in_memory=config.max_transfer_count_on_message_in_memory,
        max_transfer_bytes_on_message_in_disk=config.max_transfer_bytes_on_message_in_disk,
        max_transfer_count_on_message_in_disk=config.max_transfer_count_on_message_in_disk,
        max_filter_message_size=config.max_filter_message_size,
        memory_window=window,
    )


def registered_subscription(data: SubscriptionData | None) -> Subscription | None:
    """The subscription a consumer registered by heartbeat, to filter by: its tags'
    codes as the consumer computed them (``codeSet``), every message for ``*`` or a
    class filter."""
    if data is None:
        return None
    every = data.class_filter_mode or not data.sub_string or data.sub_string == SUB_ALL
    return Subscription(data.sub_string, None if every else frozenset(data.code_set),
                        data.expression_type or EXPRESSION_TAG, data.sub_version)


class _Waiting:
    """A pull's handler waiting for its response (which the driver may give while it
    is held)."""

    __slots__ = ("done", "response")

    def __init__(self) -> None:
        # Made only for a pull that waits: most are answered before their handler returns.
        self.done: trio.Event | None = None
        self.response: RemotingCommand | None = None

    def reply(self, response: RemotingCommand) -> None:
        self.response = response
        if self.done is not None:
            self.done.set()


class _Tables:
    """The broker's tables as the pull flow reads them (their look-ups themselves: one
    call each on a pull's path)."""

    def __init__(self, topics: TopicService, offsets: ConsumerOffsetService,
                 group_known: Callable[[str], bool],
                 registered: Callable[[str, str], Subscription | None]) -> None:
        self.topic: Callable[[str], TopicConfig | None] = topics.table.get
        self.group_known = group_known
        self.registered = registered
        self.take_reset: Callable[[str, str, int], int | None] = offsets.table.take_reset


class PullService:
    """The broker's pulls: the handler and the held pulls' driver.

    ``group_known(group)``: whether the consumer group exists (or is created
    now); ``registered(group, topic)``: the subscription the group's
    consumers registered by heartbeat, for pulls that carry none;
    ``broker``: the role, the confirm offset (consumers read up to it) and
    whether the group has a master, which a slave's refusals depend on.
    """

    def __init__(self, *, log: CommitLog, config: BrokerConfig, topics: TopicService,
                 offsets: ConsumerOffsetService, broker: ComponentView,
                 limits: PullLimits,
                 group_known: Callable[[str], bool] = lambda group: True,
                 registered: Callable[[str, str], Subscription | None] = (
                     lambda group, topic: None),
                 got: Callable[[str, str, int], None] = lambda group, topic, count: None,
                 stats: StoreStats | None = None) -> None:
        self.log = log
        self.config = config
        self.topics = topics
        self.offsets = offsets
        self.broker = broker
        self.group_known = group_known
        self.registered = registered
        #: Told of every FOUND pull's messages (the group's consumeTps counts them).
        self.got = got
        #: Counts each store read and what it found (GET_BROKER_RUNTIME_INFO's rates).
        self.stats = stats if stats is not None else StoreStats(0)
        self.flow: BrokerPullFlow[_Waiting] = BrokerPullFlow(BrokerPullSettings(
            broker_name=config.broker_name, limits=limits,
            lite_pull_message_enable=config.lite_pull_message_enable,
            slave_read_enable=config.slave_read_enable,
            offset_check_in_slave=config.offset_check_in_slave,
            long_polling_enable=config.long_polling_enable,
            short_polling_time_mills=config.short_polling_time_mills,
            millis_per_unit=1000), _Tables(topics, offsets, group_known, registered))
        self._wakeup = trio.Event()
        self._grew = False
        self._release_all = False

    def register(self, server: RpcServer) -> None:
        # Not inline: a held pull waits in its handler.
        server.register(RequestCode.PULL_MESSAGE, self.pull_message)
        server.register(RequestCode.LITE_PULL_MESSAGE, self.pull_message)

    @property
    def holds(self) -> Sized:
        """The held pulls (``len``: how many)."""
        return self.flow.holds

    @property
    def master_online(self) -> bool:
        """On a slave, whether its group has a master (not while it acts for it)."""
        return not self.broker.acting and self.broker.master_address() is not None

    def _role(self) -> PullRole:
        return PullRole(self.broker.is_master, self.master_online, self.broker.confirm_offset)

    # -- what the broker tells it ------------------------------------------------

    def appended(self) -> None:
        """Records landed in the log: held pulls of queues that grew are answered."""
        if len(self.holds):
            self._grew = True
            self._wakeup.set()

    def role_changed(self) -> None:
        """Every held pull is answered (a slave's consumers then follow its suggestion)."""
        if len(self.holds):
            self._release_all = True
            self._wakeup.set()

    # -- the handler ---------------------------------------------------------------

    async def pull_message(self, request: RemotingCommand, peer: RpcConnection
                           ) -> RemotingCommand:
        """PULL_MESSAGE: the records after the consumer's offset, at once or when they come."""
        waiting = _Waiting()
        now = trio.current_time()
        self._do([self.flow.receive(waiting, request.code, request.ext_fields, now,
                                    self._role())], now)
        if waiting.response is None:
            waiting.done = trio.Event()
            try:
                await waiting.done.wait()
            finally:
                # Answered, or the consumer went away (the connection's task is cancelled).
                self.flow.gone(waiting)
        assert waiting.response is not None
        return waiting.response

    def _do(self, effects: Iterable[PullEffect[_Waiting]], now: float) -> None:
        """Carry out the flow's effects, and those they lead to (all at ``now``: none
        awaits)."""
        pending = list(effects)
        while pending:
            effect = pending.pop(0)
            if isinstance(effect, Refuse):
                effect.pull.reply(RemotingCommand.response(effect.code, remark=effect.remark))
            elif isinstance(effect, LookUp):
                try:
                    found = effect.run(self.log)
                except (StoreError, OSError) as exc:
                    effect.pull.reply(self._unreadable(effect, exc))
                    continue
                if effect.reset_offset is None:  # a reset's answer reads no entries
                    self.stats.looked_up(len(found.ranges))
                pending[:0] = self.flow.looked_up(effect, found, now)
            elif isinstance(effect, CommitOffset):
                self.offsets.commit(effect.group, effect.topic, effect.queue_id, effect.offset)
            elif isinstance(effect, Held):
                self._wakeup.set()  # the driver's next deadline may be this one
            else:
                effect.pull.reply(self._response(effect))

    def _response(self, effect: Respond[_Waiting]) -> RemotingCommand:
        header, result = effect.header, effect.answer
        try:
            body = b"".join(self.log.read(offset, size) for offset, size in result.ranges)
        except (StoreError, OSError) as exc:
            return self._unreadable(effect, exc)
        if result.code == ResponseCode.SUCCESS:
            self.got(header.consumer_group, header.topic, len(result.ranges))
            self.stats.delivered(header.consumer_group, header.topic, len(result.ranges),
                                 len(body))
        return RemotingCommand.response(result.code, remark=result.remark,
                                        ext_fields=result.fields, body=body)

    @staticmethod
    def _unreadable(effect: LookUp[_Waiting] | Respond[_Waiting], exc: Exception
                    ) -> RemotingCommand:
        # The store's own words may name server files: they stay in the log.
        header = effect.header
        log.error("pulling from %s queue %d failed: %s", header.topic, header.queue_id, exc)
        reason = errno.errorcode.get(getattr(exc, "errno", 0) or 0, type(exc).__name__)
        return RemotingCommand.response(
            ResponseCode.SYSTEM_ERROR,
            remark=f"the store could not be read ({reason}); see the broker's log")

    # -- the driver ----------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Release held pulls as their queues grow or their time runs out, until cancelled."""
        task_status.started()
        while True:
            deadline = self.flow.next_deadline()
            with trio.move_on_at(math.inf if deadline is None else deadline):
                await self._wakeup.wait()
            self._wakeup = trio.Event()
            role, now = self._role(), trio.current_time()
            self._do(self.flow.timer(now, role), now)
            if self._release_all:
                self._release_all = self._grew = False
                self._do(self.flow.role_changed(role), now)
            if self._grew:
                self._grew = False
                self._do(self.flow.appended(self.log, role), now)
