"""Slave acting master (seed 003) as a plugin (entry point ``acting_master``).

- ``triomq_broker_components``: on a broker with ``enable_slave_acting_master``,
  the ``acting-master`` component (``member_group_service``): it learns the
  group's alive members from the name servers (GET_BROKER_MEMBER_GROUP and
  NOTIFY_MIN_BROKER_ID_CHANGE) and, on the alive slave with the smallest
  brokerId while the master is gone, runs the broker's acting term (the
  components scoped ``Scope.ACTING_TERM``) until the master or a smaller
  slave is back. The rule is ``triomq.broker.registration.core.member_group.GroupWatch``
  (pure, in the kernel, which the cluster simulation runs too).

- ``triomq_escape_bridge``: ``"container"`` (``container_bridge``), a put on
  a master of the cluster running in the same process; ``"remote"``
  (``remote_bridge``), with ``enable_remote_escape``, a send to a master of
  another group of the cluster.

The acting term runs the broker's components scoped to it (``triomq.broker``
builds them): the delayed and timer messages' delivery, the transaction
check and the pop revive, their output escaped through
``acting_escape_bridges`` (these bridges), and END_TRANSACTION; an acting
slave also answers the offset queries and queue locks from its replica.
POP itself stays refused on any slave.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from triomq.hookspecs import EscapeBridgeFactory, hookimpl
from triomq.plugins.acting_master.container_bridge import ContainerEscapeBridge
from triomq.plugins.acting_master.member_group_service import MemberGroupService
from triomq.plugins.acting_master.remote_bridge import RemoteEscapeBridge

if TYPE_CHECKING:
    from triomq.broker.components import BrokerComponent, ComponentView
    from triomq.runtime import Node

__all__ = ["ContainerEscapeBridge", "MemberGroupService", "RemoteEscapeBridge"]


@hookimpl
def triomq_escape_bridge() -> Mapping[str, EscapeBridgeFactory]:
    return {"container": ContainerEscapeBridge, "remote": RemoteEscapeBridge}


@hookimpl
def triomq_broker_components(node: Node, broker: ComponentView
                             ) -> Iterable[BrokerComponent] | None:
    config = node.config.broker
    if not config.enable_slave_acting_master:
        return None
    return [MemberGroupService(
        broker, node.rpc, cluster=config.cluster_name, broker_name=config.broker_name,
        namesrvs=tuple(config.namesrv_addr), sync_period=config.sync_broker_member_group_period,
        timeout_ms=config.send_heartbeat_timeout,
        compatible=config.compatible_with_old_name_srv)]
