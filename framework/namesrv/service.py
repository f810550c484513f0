"""The name-server service: a thin trio driver of ``triomq.namesrv.processor``.

Requests are answered inline by the pure core with ``trio.current_time()``
in ms (so tests run under a mock clock); a closed RPC connection removes
the brokers that registered on it; a loop scans for silent brokers every
``scan_not_active_broker_interval``; NOTIFY_MIN_BROKER_ID_CHANGE goes out
oneway, each in its own task, and a broker that cannot be reached is
skipped (it polls GET_BROKER_MEMBER_GROUP too).
"""

from __future__ import annotations

import logging
import weakref
from typing import TYPE_CHECKING

import trio

from triomq.clock import now_ms
from triomq.errors import PluginError
from triomq.namesrv.processor import NameServerCode, NameServerCore
from triomq.namesrv.route_info import RouteInfo
from triomq.protocol.remoting import RemotingCommand
from triomq.rpc import RpcConnection, RpcError

if TYPE_CHECKING:
    from triomq.namesrv.config import NamesrvConfig
    from triomq.runtime import Node

__all__ = ["broker_rpc_address", "namesrv_of", "namesrv_service"]

logger = logging.getLogger("triomq.namesrv")

_cores: weakref.WeakKeyDictionary[Node, NameServerCore] = weakref.WeakKeyDictionary()


def namesrv_of(node: Node) -> NameServerCore:
    """The name server running in ``node``; ``PluginError`` if it runs none."""
    try:
        return _cores[node]
    except KeyError:
        raise PluginError(f"node {node.name!r} runs no name server") from None


def broker_rpc_address(address: str) -> str:
    """A registered address as the RPC client dials it (RocketMQ's carry no scheme)."""
    return address if "://" in address else f"tcp://{address}"


async def namesrv_service(node: Node, task_status: trio.TaskStatus[NameServerCore]) -> None:
    config: NamesrvConfig = node.config.section("namesrv")
    core = NameServerCore(RouteInfo(
        support_acting_master=config.support_acting_master,
        delete_topic_with_broker_registration=config.delete_topic_with_broker_registration,
        default_broker_timeout_ms=config.broker_not_active_timeout))
    async with trio.open_nursery() as nursery:

        def send_notices() -> None:
            for address, command in core.take_notices():
                nursery.start_soon(_notify, node, address, command)

        async def handle(request: RemotingCommand, peer: RpcConnection) -> RemotingCommand:
            response = core.handle(request, peer, now_ms())
            send_notices()
            return response

        def closed(connection: RpcConnection) -> None:
            core.connection_closed(connection)
            send_notices()

        def heard(request: RemotingCommand, peer: RpcConnection) -> None:
            fields = request.ext_fields
            core.route.touch(fields.get("clusterName", ""), fields.get("brokerAddr", ""),
                             now_ms())

        codes = set(core.codes) - {NameServerCode.BROKER_HEARTBEAT}
        if not config.enable_all_topic_list:
            codes.discard(NameServerCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        for code in sorted(codes):
            node.rpc_server.register(code, handle, inline=True)
        # A controller embedded in this node answers BROKER_HEARTBEAT (904) for
        # itself; the routes still count every heartbeat as a sign of life.
        node.rpc_server.register_fallback(NameServerCode.BROKER_HEARTBEAT, handle, inline=True)
        node.rpc_server.observe(NameServerCode.BROKER_HEARTBEAT, heard)
        node.rpc_server.on_connection_closed.append(closed)
        _cores[node] = core
        task_status.started(core)
        try:
            while True:
                await trio.sleep(config.scan_not_active_broker_interval / 1000)
                core.scan(now_ms())
                send_notices()
        finally:
            node.rpc_server.on_connection_closed.remove(closed)


async def _notify(node: Node, address: str, command: RemotingCommand) -> None:
    try:
        await node.rpc.invoke_oneway(broker_rpc_address(address), command.code,
                                     command.ext_fields, timeout=1.0)
    except RpcError as exc:
        logger.info("could not tell %s its group's smallest broker id changed: %s",
                    address, exc)
