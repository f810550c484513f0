"""The broker's own components, and the plugins' after them, in the order they start.

``built_in_components`` loads the files each needs (subscription groups,
consumer offsets, delay offsets, the timer checkpoint) and wires every
service of ``triomq.broker`` to the broker's log, clock, view and put flow;
an acting-master broker (``enable_slave_acting_master``) adds the acting
term's components, whose puts go through the acting escape bridge.
``plugin_components`` asks the ``triomq_broker_components`` hook.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import trio

from triomq.broker.acting import (
    ActingEscapeBridge,
    acting_tables_component,
    acting_transactions_component,
    pre_online_component,
)
from triomq.broker.admin.consume_stats_service import ConsumeStatsService
from triomq.broker.admin.pending_service import PendingMessagesService
from triomq.broker.admin.runtime_info import RuntimeInfoService
from triomq.broker.components import BrokerComponent, Component, Scope, Task
from triomq.broker.consume.clients import ClientService, load_subscription_groups
from triomq.broker.consume.core.consumer_offsets import ConsumerOffsetTable
from triomq.broker.consume.group_names import register_group_checks
from triomq.broker.consume.offset_service import ConsumerOffsetService, load_offsets
from triomq.broker.consume.pull_service import (
    PullService,
    memory_window,
    pull_limits,
    registered_subscription,
)
from triomq.broker.core.escape_bridge import LocalEscapeBridge
from triomq.broker.index.index_service import IndexService
from triomq.broker.index.queries import QueryService
from triomq.broker.pop.pop_service import PopService
from triomq.broker.pop.revive_service import ReviveService
from triomq.broker.registration.core.ha_info import HaInfo
from triomq.broker.registration.ha_info_service import HaInfoService
from triomq.broker.registration.namesrv_client import route_address
from triomq.broker.replication.controller_mode import ControllerMode
from triomq.broker.secondary.core.delay_offsets import DelayOffsetTable
from triomq.broker.secondary.core.timer_checkpoint import TimerCheckpointTable
from triomq.broker.secondary.core.transaction import HALF_TOPIC
from triomq.broker.secondary.schedule_service import ScheduleMessageService, load_delay_offsets
from triomq.broker.secondary.send_back_service import SendBackService
from triomq.broker.secondary.timer_service import TimerMessageService, load_timer_checkpoint
from triomq.broker.secondary.transaction_service import TransactionService
from triomq.clock import now_ms
from triomq.protocol.route import PERM_INHERIT, TopicConfig
from triomq.protocol.topic_rules import SYNC_BROKER_MEMBER_GROUP_PREFIX

if TYPE_CHECKING:
    from triomq.broker.service import Broker

__all__ = ["built_in_components", "plugin_components"]


async def built_in_components(broker: Broker, root: str) -> list[BrokerComponent]:
    """The broker's own components, in the order they start (their files loaded)."""
    node, config, log, view = broker.node, broker.config, broker.log, broker.view
    topics, processor, replicas = broker.topics, broker.processor, broker.replicas
    groups = await trio.to_thread.run_sync(load_subscription_groups, root, now_ms())
    clients = broker.clients = ClientService(root, config, groups, topics, broker=view)
    offsets_table = await trio.to_thread.run_sync(
        load_offsets, root, config.consumer_offset_update_version_step)
    delay_offsets = await trio.to_thread.run_sync(
        load_delay_offsets, root, config.delay_offset_update_version_step)
    window = memory_window(config)
    acting_bridge = ActingEscapeBridge(node) if config.enable_slave_acting_master else None
    if acting_bridge is not None and config.compatible_with_old_name_srv:
        # Its route names the group's alive members to an old name server's brokers.
        topics.table.update(TopicConfig(SYNC_BROKER_MEMBER_GROUP_PREFIX + config.broker_name,
                                        1, 1, perm=PERM_INHERIT), broker.clock(), system=True)

    def acting(tasks: list[tuple[str, Task]]) -> list[BrokerComponent]:
        # An acting slave runs these for its absent master, escaping what they put.
        if acting_bridge is None:
            return []
        return [Component(name, scope=Scope.ACTING_TERM, soon=[task]) for name, task in tasks]

    def group_known(group: str) -> bool:
        # A group unknown yet is created by its consumers' heartbeat.
        return group in clients.groups or clients.may_create_group()

    offsets = broker.offsets = ConsumerOffsetService(
        root, config, offsets_table, log=log, topics=topics, broker=view,
        memory_window=window, group_known=group_known,
        group_exists=lambda group: group in clients.groups)
    clients.remove_offsets = offsets.table.remove_group
    stats = ConsumeStatsService(log=log, broker_name=config.broker_name, topics=topics,
                                offsets=offsets, clients=clients, broker=view,
                                store_stats=processor.stats,
                                broker_addr=route_address(node.address or node.name))
    pulls = broker.pulls = PullService(
        log=log, config=config, topics=topics, offsets=offsets, broker=view,
        limits=pull_limits(config, window), group_known=group_known,
        registered=lambda group, topic: registered_subscription(
            clients.subscription(group, topic)),
        got=stats.got, stats=processor.stats)
    if config.message_index_enable:
        broker.index = IndexService(log, root, config)
    queries = QueryService(log, broker.index, config)
    clients.record_at = queries.record_bytes
    runtime_info = RuntimeInfoService(broker, root)
    send_backs = SendBackService(
        find_group=clients.find_group, topics=topics, record_at=queries.record_bytes,
        bridge=LocalEscapeBridge(processor.put_own), broker=view,
        broker_ip=processor.store_host[0])
    transactions = broker.transactions = TransactionService(
        config=config, broker=view, bridge=LocalEscapeBridge(processor.put_own),
        offsets=offsets, producer_connection=clients.table.producer_connection,
        clock=broker.clock)
    pops = broker.pops = PopService(config=config, log=log, topics=topics, offsets=offsets,
                      find_group=clients.find_group, bridge=LocalEscapeBridge(processor.put_own),
                      broker=view, clock=broker.clock)
    revive = broker.revive = ReviveService(
        config=config, log=log, offsets=offsets, broker=view,
        bridge=LocalEscapeBridge(processor.put_own), clock=broker.clock,
        ensure_retry_topic=pops.ensure_retry_topic, ensure_revive_topic=pops.ensure_revive_topic,
        rpc=node.rpc)

    def appended() -> None:
        pulls.appended()
        pops.appended()

    replicas.on_appended = appended
    schedule = broker.schedule = ScheduleMessageService(
        root, config, delay_offsets, log=log, broker=view,
        bridge=LocalEscapeBridge(processor.put_own), clock=broker.clock)
    def tables() -> list[ConsumerOffsetTable | DelayOffsetTable | TimerCheckpointTable]:
        """The tables of where the broker got to in its queues (the timer's, once made)."""
        return [offsets.table, schedule.table,
                *([] if broker.timer is None else [broker.timer.table])]

    parts = [
        Component("role", role_changed=broker.role_changed),
        Component("flush", start=[broker.flush.run]),
        Component("replicas", start=[replicas.run]),
        Component("confirm-offset", soon=[broker.record_confirm_offset]),
        Component("slave-flush", scope=Scope.SLAVE_TERM, soon=[broker.flush_slave_log]),
        Component("topics", register=topics.register, soon=[topics.persist_loop]),
        Component("sends", register=[register_group_checks, processor.register]),
    ]
    if broker.index is not None:
        parts.append(Component("index", start=[broker.index.run]))
    parts += [
        Component("queries", register=queries.register),
        Component("runtime-info", register=runtime_info.register, soon=[runtime_info.run]),
        Component("replicated-stats", scope=Scope.SLAVE_TERM,
                  soon=[runtime_info.count_replicated]),
        Component("clients", register=clients.register,
                  start=[clients.run]),
        Component("locks", register=broker.locks.register, start=[broker.locks.run]),
        Component("pulls", register=pulls.register, start=[pulls.run],
                  role_changed=lambda role, epoch: pulls.role_changed()),
        Component("offsets", register=offsets.register, soon=[offsets.persist_loop]),
        Component("consume-stats", register=stats.register, soon=[stats.sample]),
        Component("send-back", scope=Scope.MASTER_TERM, register=send_backs.register),
        Component("transactions", scope=Scope.MASTER_TERM, register=transactions.register,
                  soon=[transactions.check_loop], role_changed=transactions.role_changed),
        *([] if acting_bridge is None else [
            acting_transactions_component(transactions, acting_bridge)]),
        Component("delay-offsets", register=schedule.register, soon=[schedule.persist_loop]),
        Component("schedule", scope=Scope.MASTER_TERM, soon=[schedule.deliver]),
        *([] if acting_bridge is None else [acting_tables_component(tables, broker.clock)]),
        *acting([("acting-schedule", functools.partial(schedule.deliver, acting_bridge))]),
        Component("pop", scope=Scope.MASTER_TERM, register=pops.register,
                  soon=[revive.revive]),
        *acting([("acting-revive", functools.partial(revive.revive, acting_bridge))]),
        *([] if acting_bridge is None else [Component(
            "acting-pop", scope=Scope.ACTING_TERM,
            start=[functools.partial(pops.acting_term, acting_bridge)])]),
    ]
    if config.timer_wheel_enable:
        timer = broker.timer = TimerMessageService(
            root, config, await trio.to_thread.run_sync(load_timer_checkpoint, root),
            log=log, broker=view, bridge=LocalEscapeBridge(processor.put_own),
            clock=broker.clock)
        parts += [
            Component("timer-checkpoint", register=timer.register, soon=[timer.persist_loop]),
            Component("timer", scope=Scope.MASTER_TERM, soon=[timer.deliver]),
            *acting([("acting-timer", functools.partial(timer.deliver, acting_bridge))]),
        ]
    # RocketMQ's SlaveSynchronize: a following slave copies its master's tables.
    parts.append(Component("slave-synchronize", scope=Scope.SLAVE_TERM, soon=[
        functools.partial(table.copy_from_master, node.rpc)
        for table in (topics, clients, offsets, schedule, broker.timer) if table is not None]))
    def truncated() -> None:
        # Offsets past the cut would take the other messages written there since for
        # consumed or delivered.
        for table in tables():
            table.truncated(log.queue_max_offset)

    replicas.on_truncated = truncated
    pending = PendingMessagesService(
        config=config, log=log, broker=view, delay_offsets=schedule.table,
        timer_checkpoint=broker.timer.table if broker.timer is not None else None,
        offsets=offsets, half_progress=lambda: transactions.progress(HALF_TOPIC))
    parts.append(Component("pending-messages", register=pending.register))
    init_max_offset = log.max_offset
    ha_info = HaInfoService(
        broker_name=config.broker_name, static=not config.enable_controller_mode,
        master_ha_address=config.ha_master_address,
        replicas=replicas, own=lambda: HaInfo(
            route_address(broker.ha_address), init_max_offset,
            route_address(node.address or node.name)))
    parts.append(Component("ha-info", register=ha_info.register))
    if broker.isolated:
        parts.append(pre_online_component(broker, offsets, schedule, ha_info))
    if broker.namesrv is not None:
        parts.append(Component("namesrv-registration", start=[broker.namesrv.run]))
    if config.enable_controller_mode:
        broker.controller_mode = ControllerMode(broker, root)
        replicas.reporter = broker.controller_mode
        parts.append(Component("controller-mode", start=[broker.controller_mode.run]))
    return parts


def plugin_components(broker: Broker) -> list[BrokerComponent]:
    """What the plugins add (``triomq_broker_components``), in registration order."""
    answers = broker.node.plugins.hook.triomq_broker_components(node=broker.node,
                                                                broker=broker.view)
    # pluggy answers the last registered plugin first.
    return [component for answer in reversed(answers) if answer for component in answer]
