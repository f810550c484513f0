"""EXCHANGE_BROKER_HA_INFO (906) on a broker: a thin driver of ``core.ha_info``.

A slave told by its master that it is back reconnects its HA client now
(``ReplicasManager.master_announced``); a master answers the query form with
its HA address, its log's end at start and its address (a controller-mode
slave asks so before it follows the master the controllers named); the
rest is the core's. ``announce`` is the master's side, for its pre-online.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.broker.registration.core.ha_info import Answer, Follow, HaInfo, exchange
from triomq.broker.registration.namesrv_client import rpc_address
from triomq.broker.replication.replicas_manager import BrokerRole, ReplicasManager
from triomq.protocol.header_fields import HeaderFieldError
from triomq.protocol.remoting import RemotingCommand
from triomq.rpc import RpcClient, RpcConnection, RpcError, RpcServer

__all__ = ["HaInfoService"]

log = logging.getLogger("triomq.broker")

#: Seconds a slave has to answer an announcement.
ANNOUNCE_TIMEOUT = 3.0


class HaInfoService:
    """Answers EXCHANGE_BROKER_HA_INFO, and sends it for a returning master."""

    def __init__(self, *, broker_name: str, static: bool,
                 master_ha_address: str, replicas: ReplicasManager,
                 own: Callable[[], HaInfo]) -> None:
        self.broker_name = broker_name
        self.static = static
        self.master_ha_address = rpc_address(master_ha_address) if master_ha_address else ""
        self.replicas = replicas
        self.own = own

    def register(self, server: RpcServer) -> None:
        server.register(RequestCode.EXCHANGE_BROKER_HA_INFO, self.exchange_ha_info, inline=True)

    async def exchange_ha_info(self, request: RemotingCommand, peer: RpcConnection
                               ) -> RemotingCommand:
        try:
            info = HaInfo.parse(request.ext_fields)
        except HeaderFieldError as exc:
            return RemotingCommand.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))
        if info.master_ha_address is not None:
            info = HaInfo(rpc_address(info.master_ha_address), info.master_flush_offset,
                          info.master_address)
        outcome = exchange(info, broker_name=self.broker_name,
                           master=self.replicas.role is BrokerRole.MASTER,
                           static=self.static, master_ha_address=self.master_ha_address,
                           own=self.own())
        if isinstance(outcome, Answer):
            return RemotingCommand.response(ext_fields=outcome.info.fields())
        if isinstance(outcome, Follow):
            if self.replicas.master_announced(outcome.ha_address):
                log.info("master %s announced itself: reconnecting now", outcome.ha_address)
            return RemotingCommand.response()
        log.warning("%s (from %s)", outcome.remark, peer.peer)
        return RemotingCommand.response(outcome.code, remark=outcome.remark)

    async def announce(self, rpc: RpcClient, slave: str) -> None:
        """Tell ``slave`` this master is back (its refusal or silence is logged: the
        slave reconnects by its backoff then)."""
        try:
            answer = await rpc.invoke(slave, RequestCode.EXCHANGE_BROKER_HA_INFO,
                                      self.own().fields(), timeout=ANNOUNCE_TIMEOUT)
        except RpcError as exc:
            log.info("pre-online: slave %s not told this master is back: %s", slave, exc)
            return
        if answer.code != ResponseCode.SUCCESS:
            log.warning("pre-online: slave %s refused this master's HA info: %s (%d)",
                        slave, answer.remark, answer.code)
