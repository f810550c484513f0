"""GET_BROKER_RUNTIME_INFO (28): a running broker's KVTable, as ``mqadmin brokerStatus`` reads it.

The table's keys and the rules that fill them are ``triomq.broker.runtime_table``'s;
this reads them from the broker when asked. A broker of a static group answers
as well as one in controller mode.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from triomq.broker.codes import RequestCode
from triomq.broker.runtime_table import SlaveConnection, runtime_table
from triomq.protocol.remoting import RemotingCommand

if TYPE_CHECKING:
    from triomq.broker.service import Broker
    from triomq.rpc import RpcConnection, RpcServer

__all__ = ["RuntimeInfoService"]


class RuntimeInfoService:
    """Answers GET_BROKER_RUNTIME_INFO for ``broker``, as it is when asked."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def register(self, server: RpcServer) -> None:
        server.register(RequestCode.GET_BROKER_RUNTIME_INFO, self.runtime_info, inline=True)

    def table(self) -> dict[str, str]:
        broker = self.broker
        replicas = broker.replicas
        state = replicas.state()
        master = replicas.ha_master
        slaves = ([SlaveConnection(address, p.ack_offset, p.connections, p.is_async_learner)
                   for address, p in master.tracker.slaves.items() if p.connected]
                  if master is not None else [])
        return runtime_table(
            cluster_name=broker.config.cluster_name, broker_name=broker.config.broker_name,
            broker_id=broker.broker_id, role=state.role.value,
            master_epoch=state.master_epoch, min_offset=broker.log.min_offset,
            max_offset=state.max_offset, confirm_offset=state.confirm_offset,
            ha_address=replicas.ha_address, master_ha_address=state.master_ha_address,
            sync_state_set=state.sync_state_set, slaves=slaves,
            controller_mode=broker.controller_mode is not None)

    async def runtime_info(self, request: RemotingCommand, peer: RpcConnection
                           ) -> RemotingCommand:
        return RemotingCommand.response(body=json.dumps({"table": self.table()}).encode())
