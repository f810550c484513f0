"""The acting-master component: a thin trio driver of the kernel's ``GroupWatch``.

``GroupWatch`` (``triomq.broker.registration.core.member_group``, pure) sits in the
kernel so that the cluster simulation runs the same rule.

It polls GET_BROKER_MEMBER_GROUP (901) over the node's RPC client (with
``compatible_with_old_name_srv``, the route of topic
``rmq_sys_SYNC_BROKER_MEMBER_<brokerName>`` instead, whose broker data names
the group's alive members, as RocketMQ's ``getBrokerMemberGroupCompatible``
reads them from a name server older than 901), answers
NOTIFY_MIN_BROKER_ID_CHANGE (905) from the name servers, and begins and ends
the broker's acting term (``ComponentView.start_acting``) as the watch
decides. The acting term runs in the slave term's nursery, so a role change
ends it with the slave term even before the watch hears of the change.
"""

from __future__ import annotations

import logging
import math

import trio

from triomq.broker.components import ActingTerm, ComponentView, Scope
from triomq.broker.core.role import BrokerRole
from triomq.broker.registration.core.member_group import (
    GroupAction,
    GroupWatch,
    QueryMemberGroup,
    StartActing,
    StopActing,
)
from triomq.broker.registration.member_group import query_member_group
from triomq.clock import now_ms
from triomq.errors import TriomqError
from triomq.protocol.header_fields import HeaderFields
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.request_codes import RequestCode
from triomq.protocol.response_codes import ResponseCode
from triomq.rpc import RpcClient, RpcConnection, RpcServer

__all__ = ["MemberGroupService"]

log = logging.getLogger("triomq.broker")


class MemberGroupService:
    """Knows which members of the broker's group are alive; acts when it must."""

    name = "acting-master"
    scope = Scope.ALWAYS

    def __init__(self, view: ComponentView, rpc: RpcClient, *, cluster: str, broker_name: str,
                 namesrvs: tuple[str, ...], sync_period: int, timeout_ms: int,
                 compatible: bool = False) -> None:
        self.view = view
        self.compatible = compatible
        self.rpc = rpc
        self.cluster = cluster
        self.broker_name = broker_name
        self.timeout_ms = timeout_ms
        self.watch = GroupWatch(namesrvs, broker_id=view.broker_id, sync_period=sync_period)
        #: The acting term this component began, while it runs or last ran.
        self.term: ActingTerm | None = None
        self._nursery: trio.Nursery | None = None
        self._wake = trio.Event()

    def register(self, server: RpcServer) -> None:
        server.register(RequestCode.NOTIFY_MIN_BROKER_ID_CHANGE, self._notified, inline=True)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._carry_out(self.watch.start(now_ms()))
            task_status.started()
            while True:
                wakeup = self.watch.next_wakeup()
                with trio.move_on_at(math.inf if wakeup is None else wakeup / 1000):
                    await self._wake.wait()
                self._carry_out(self.watch.poll(now_ms()))
                # After carrying out, which wakes this loop too: waking itself would
                # spin it (and stop a mock clock's time).
                self._wake = trio.Event()

    def role_changed(self, role: BrokerRole, master_epoch: int) -> None:
        self._carry_out(self.watch.role_changed(
            is_slave=role is BrokerRole.SLAVE, broker_id=self.view.broker_id, now=now_ms()))

    # -- carrying out ---------------------------------------------------------------------

    def _carry_out(self, actions: list[GroupAction]) -> None:
        if self._nursery is None:  # a role change before the broker started this
            return
        for action in actions:
            if isinstance(action, QueryMemberGroup):
                self._nursery.start_soon(self._query, action.namesrv)
            elif isinstance(action, StartActing):
                self._nursery.start_soon(self._begin)
            elif isinstance(action, StopActing):
                log.warning("broker %s id %d stops acting for its master: %s",
                            self.broker_name, self.view.broker_id, action.why)
                if self.term is not None:
                    self.term.end()
        self._wake.set()

    async def _begin(self) -> None:
        # A term just ended may still be cancelling its components.
        if self.term is not None:
            self.term.end()
            await self.term.wait_ended()
        if not self.watch.acting:
            return  # stopped again meanwhile
        try:
            self.term = await self.view.start_acting()
        except RuntimeError as exc:
            # A role change under way: the watch hears of it and decides again.
            log.info("broker %s id %d does not act: %s", self.broker_name,
                     self.view.broker_id, exc)
            return
        if not self.watch.acting:
            self.term.end()

    async def _query(self, namesrv: str) -> None:
        addrs = await query_member_group(
            self.rpc, namesrv, cluster=self.cluster, broker_name=self.broker_name,
            compatible=self.compatible, timeout=self.timeout_ms / 1000)
        self._carry_out(self.watch.member_group(namesrv, addrs, now_ms()))

    async def _notified(self, request: RemotingCommand, peer: RpcConnection
                        ) -> RemotingCommand | None:
        """NOTIFY_MIN_BROKER_ID_CHANGE (oneway): the group's smallest alive brokerId."""
        header = HeaderFields(request.ext_fields, "NOTIFY_MIN_BROKER_ID_CHANGE")
        try:
            min_broker_id = header.integer("minBrokerId")
        except TriomqError as exc:
            log.warning("refused from %s: %s", peer.peer, exc)
            return RemotingCommand.response(code=ResponseCode.SYSTEM_ERROR, remark=str(exc))
        group = request.ext_fields.get("brokerName")
        if group and group != self.broker_name:
            remark = (f"NOTIFY_MIN_BROKER_ID_CHANGE: header field 'brokerName': {group!r} "
                      f"is not this broker's group {self.broker_name!r}")
            log.warning("refused from %s: %s", peer.peer, remark)
            return RemotingCommand.response(code=ResponseCode.SYSTEM_ERROR, remark=remark)
        self._carry_out(self.watch.min_broker_id_changed(min_broker_id, now_ms()))
        return RemotingCommand.response()
