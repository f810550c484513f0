"""The broker's side of slave acting master (RIP-32), as the broker assembles it.

- ``ActingEscapeBridge``: what a slave acting for its absent master puts its
  secondary messages' output through, the escape bridges its
  ``acting_escape_bridges`` names (plugins provide them), tried in order;
- ``acting_tables_component``: at each acting term's start, the tables the
  acting slave moves on for its master enter a new DataVersion state;
- ``acting_transactions_component``: the transaction check and END_TRANSACTION
  of an acting term (``triomq.broker.secondary.acting_transaction_service``);
- ``pre_online_component``: a returning static master's pre-online
  (``triomq.broker.registration.pre_online_service``) over the tables it takes
  back from its slaves (consumer offsets, delay offsets, timer checkpoint),
  telling them first that it is back (EXCHANGE_BROKER_HA_INFO).

Which slave acts, and when, is the ``acting_master`` plugin's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

import trio

from triomq.broker.components import BrokerComponent, Component, Scope
from triomq.broker.consume.core.consumer_offsets import ConsumerOffsetTable
from triomq.broker.core.codes import RequestCode
from triomq.broker.core.escape_bridge import EscapedMessage, EscapeResult, FallbackEscapeBridge
from triomq.broker.core.role import BrokerRole
from triomq.broker.registration.pre_online_service import MetadataTable, PreOnlineService
from triomq.broker.secondary.acting_transaction_service import ActingTransactionService
from triomq.broker.secondary.core.delay_offsets import DelayOffsetTable
from triomq.broker.secondary.core.timer_checkpoint import TimerCheckpointTable
from triomq.clock import EpochClock
from triomq.protocol.route import DataVersion

if TYPE_CHECKING:
    from triomq.broker.consume.offset_service import ConsumerOffsetService
    from triomq.broker.registration.ha_info_service import HaInfoService
    from triomq.broker.secondary.schedule_service import ScheduleMessageService
    from triomq.broker.secondary.transaction_service import TransactionService
    from triomq.broker.service import Broker
    from triomq.runtime import Node

__all__ = ["ActingEscapeBridge", "VersionedTable", "acting_tables_component",
           "acting_transactions_component", "pre_online_component"]


class ActingEscapeBridge:
    """What a slave acting for its absent master puts through: the escape bridges named
    by ``acting_escape_bridges``, tried in order (``FallbackEscapeBridge``), made from
    their plugins at the first put (the broker runs by then)."""

    def __init__(self, node: Node) -> None:
        self.node = node
        # Looked up now: a name no plugin provides stops the broker's start.
        self._factories = [(name, node.plugins.escape_bridge(name))
                           for name in node.config.broker.acting_escape_bridges]
        self._bridge: FallbackEscapeBridge | None = None

    async def put_message(self, message: EscapedMessage) -> EscapeResult:
        if self._bridge is None:
            self._bridge = FallbackEscapeBridge(
                [(name, factory(self.node)) for name, factory in self._factories])
        return await self._bridge.put_message(message)


class VersionedTable(Protocol):
    """A table a returning master takes back by its DataVersion."""

    data_version: DataVersion
    #: Counts changes: a table whose revision moved is saved.
    revision: int


def acting_tables_component(tables: Callable[[], Iterable[VersionedTable]],
                            clock: EpochClock) -> BrokerComponent:
    """At each acting term's start, ``tables`` (consumer offsets, delay offsets, timer
    checkpoint) enter a new DataVersion state.

    Their versions step every few hundred changes only
    (``consumer_offset_update_version_step``), so an acting term's few commits would
    leave them equal to what the slave last copied from its master, and the master
    back through pre-online would keep its older tables. A new state is newer than
    any version the absent master held, whatever their counters."""
    async def begin(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        now = clock()
        for table in tables():
            table.data_version = table.data_version.next_state(now)
            table.revision += 1
        task_status.started()

    return Component("acting-tables", scope=Scope.ACTING_TERM, start=[begin])


def acting_transactions_component(transactions: TransactionService,
                                  bridge: ActingEscapeBridge) -> BrokerComponent:
    """The acting term's transaction check, its escapes through ``bridge``, and its
    END_TRANSACTION."""
    acting = ActingTransactionService(transactions, bridge)
    return Component("acting-transactions", scope=Scope.ACTING_TERM, start=[acting.run])


def pre_online_component(broker: Broker, offsets: ConsumerOffsetService,
                         schedule: ScheduleMessageService,
                         ha_info: HaInfoService) -> BrokerComponent:
    """The returning master's pre-online, over the tables it takes back."""
    config = broker.config
    tables = {
        "consumer offsets": MetadataTable(
            RequestCode.GET_ALL_CONSUMER_OFFSET,
            functools.partial(ConsumerOffsetTable.decode,
                              version_step=config.consumer_offset_update_version_step),
            lambda: offsets.table.data_version, offsets.table.adopt_master),
        "delay offsets": MetadataTable(
            RequestCode.GET_ALL_DELAY_OFFSET,
            functools.partial(DelayOffsetTable.decode,
                              version_step=config.delay_offset_update_version_step),
            lambda: schedule.table.data_version, schedule.table.adopt_master),
    }
    timer = broker.timer
    if timer is not None:
        tables["timer checkpoint"] = MetadataTable(
            RequestCode.GET_TIMER_CHECK_POINT, TimerCheckpointTable.decode,
            lambda: timer.table.data_version, timer.table.adopt_master)
    service = PreOnlineService(
        rpc=broker.node.rpc, own=broker.rpc_address,
        tables=tables, members=broker.member_group,
        announce=functools.partial(ha_info.announce, broker.node.rpc),
        transferring=lambda: broker.replicas.transferring_slaves, go_online=broker.go_online,
        wait_ms=config.pre_online_wait, poll_ms=config.ha_send_heartbeat_interval)
    broker.pre_online = service
    return Component("pre-online", soon=[service.run], role_changed=lambda role, epoch: (
        service.master_term() if role is BrokerRole.MASTER else None))
