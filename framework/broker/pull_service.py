"""PULL_MESSAGE 11 at run time: the handler and the long-poll driver.

LITE_PULL_MESSAGE 361, which RocketMQ 5's ``DefaultLitePullConsumer``
sends, is the same pull (RocketMQ serves both with one processor), refused
with NO_PERMISSION when ``lite_pull_message_enable`` is off.

The rules are pure (``triomq.broker.pull``: the header, the checks, the
store lookup, the answer; ``triomq.broker.pull_lookup``: the slave's refusal
and the look-up in the store; ``triomq.broker.pull_hold``: the held pulls);
this module reads the records for them, sends them, and keeps time:

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
group has no master (``master_online`` false), so consumers read from it
then; otherwise it refuses them with SYSTEM_BUSY, as RocketMQ's
``rejectRequest`` does.
"""

from __future__ import annotations

import errno
import logging
import math
import os
from collections.abc import Callable

import trio

from triomq.broker.codes import RequestCode, ResponseCode
from triomq.broker.components import ComponentView
from triomq.broker.config import BrokerConfig
from triomq.broker.headers import HeaderError
from triomq.broker.heartbeat import SubscriptionData
from triomq.broker.offset_service import ConsumerOffsetService
from triomq.broker.pull import (
    GetMessageStatus,
    GetResult,
    PullAnswer,
    PullHeader,
    PullLimits,
    PullRefused,
    admit,
    answer,
    parse_pull_header,
)
from triomq.broker.pull_hold import HoldTable
from triomq.broker.pull_lookup import confirmed_queue_max, look_up, slave_refusal
from triomq.broker.store_stats import StoreStats
from triomq.broker.subscription import EXPRESSION_TAG, SUB_ALL, Subscription
from triomq.broker.topics import TopicService
from triomq.protocol.remoting import RemotingCommand
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
        self.limits = limits
        self.group_known = group_known
        self.registered = registered
        #: Told of every FOUND pull's messages (the group's consumeTps counts them).
        self.got = got
        #: Counts each store read and what it found (GET_BROKER_RUNTIME_INFO's rates).
        self.stats = stats if stats is not None else StoreStats(0)
        self.holds: HoldTable[trio.Event] = HoldTable()
        self._wakeup = trio.Event()
        self._grew = False
        self._release_all = False

    def register(self, server: RpcServer) -> None:
        # Not inline: a held pull waits in its handler.
        server.register(RequestCode.PULL_MESSAGE, self.pull_message)
        server.register(RequestCode.LITE_PULL_MESSAGE, self.pull_message)

    @property
    def master_online(self) -> bool:
        """On a slave, whether its group has a master."""
        return self.broker.master_address() is not None

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
        if (request.code == RequestCode.LITE_PULL_MESSAGE
                and not self.config.lite_pull_message_enable):
            return RemotingCommand.response(
                ResponseCode.NO_PERMISSION,
                remark=f"LITE_PULL_MESSAGE: the broker {self.config.broker_name} does not serve "
                       "lite pull consumers (lite_pull_message_enable is off)")
        try:
            header = parse_pull_header(request.ext_fields)
        except HeaderError as exc:
            return RemotingCommand.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))
        refusal = slave_refusal(self.config.broker_name, is_master=self.broker.is_master,
                                slave_read_enable=self.config.slave_read_enable,
                                master_online=self.master_online)
        if refusal is not None:
            return RemotingCommand.response(refusal.code, remark=refusal.remark)
        try:
            subscription = admit(header, self.topics.table.get(header.topic),
                                 group_known=self.group_known(header.consumer_group),
                                 registered=self.registered)
        except PullRefused as exc:
            return RemotingCommand.response(exc.code, remark=exc.remark)
        reset = self.offsets.table.take_reset(header.consumer_group, header.topic,
                                              header.queue_id)
        try:
            if reset is not None:
                result = self._reset_answer(header, reset)
            else:
                result = await self._pull(header, subscription)
            body = b"".join(self.log.read(offset, size) for offset, size in result.ranges)
            if result.code == ResponseCode.SUCCESS:
                self.got(header.consumer_group, header.topic, len(result.ranges))
                self.stats.delivered(header.topic, len(result.ranges))
        except (StoreError, OSError) as exc:
            # The store's own words may name server files: they stay in the log.
            log.error("pulling from %s queue %d failed: %s", header.topic, header.queue_id, exc)
            reason = errno.errorcode.get(getattr(exc, "errno", 0) or 0, type(exc).__name__)
            return RemotingCommand.response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"the store could not be read ({reason}); see the broker's log")
        return RemotingCommand.response(result.code, remark=result.remark,
                                        ext_fields=result.fields, body=body)

    async def _pull(self, header: PullHeader, subscription: Subscription) -> PullAnswer:
        """The pull's answer from the store, held until there is something when asked."""
        result = self._look_up(header, subscription, allow_suspend=True)
        if header.commits_offset:
            self.offsets.commit(header.consumer_group, header.topic, header.queue_id,
                                header.commit_offset)
        if result.hold:
            await self._hold(header)
            result = self._look_up(header, subscription, allow_suspend=False)
        return result

    def _look_up(self, header: PullHeader, subscription: Subscription, *,
                 allow_suspend: bool) -> PullAnswer:
        answer = look_up(self.log, header, subscription, limits=self.limits,
                         topic=self.topics.table.get(header.topic),
                         confirm_offset=self.broker.confirm_offset, is_master=self.broker.is_master,
                         master_online=self.master_online,
                         slave_read_enable=self.config.slave_read_enable,
                         offset_check_in_slave=self.config.offset_check_in_slave,
                         allow_suspend=allow_suspend)
        self.stats.looked_up(len(answer.ranges))
        return answer

    def _reset_answer(self, header: PullHeader, offset: int) -> PullAnswer:
        topic, queue_id = header.topic, header.queue_id
        config = self.topics.table.get(topic)
        result = GetResult(GetMessageStatus.OFFSET_RESET, offset,
                           self.log.queue_min_offset(topic, queue_id),
                           self._queue_max(topic, queue_id))
        return answer(result, header, topic_sys_flag=config.topic_sys_flag if config else 0,
                      is_master=self.broker.is_master, master_online=self.master_online,
                      slave_read_enable=self.config.slave_read_enable,
                      offset_check_in_slave=self.config.offset_check_in_slave)

    def _queue_max(self, topic: str, queue_id: int) -> int:
        return confirmed_queue_max(self.log, topic, queue_id, self.broker.confirm_offset)

    async def _hold(self, header: PullHeader) -> None:
        timeout_ms = (header.suspend_timeout_millis if self.config.long_polling_enable
                      else self.config.short_polling_time_mills)
        released = trio.Event()
        hold = self.holds.hold(header.topic, header.queue_id, header.queue_offset,
                               trio.current_time(), max(0, timeout_ms) / 1000, released)
        self._wakeup.set()  # the driver's next deadline may be this one
        try:
            await released.wait()
        finally:
            # Released, or the consumer went away (the connection's task is cancelled).
            self.holds.drop(hold)

    # -- the driver ----------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Release held pulls as their queues grow or their time runs out, until cancelled."""
        task_status.started()
        while True:
            deadline = self.holds.next_deadline()
            with trio.move_on_at(math.inf if deadline is None else deadline):
                await self._wakeup.wait()
            self._wakeup = trio.Event()
            released = self.holds.tick(trio.current_time())
            if self._release_all:
                self._release_all = self._grew = False
                released += self.holds.release_all()
            if self._grew:
                self._grew = False
                for topic, queue_id in self.holds.queues():
                    released += self.holds.arrived(topic, queue_id,
                                                   self._queue_max(topic, queue_id))
            for hold in released:
                hold.payload.set()
