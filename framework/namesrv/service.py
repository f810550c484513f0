"""The name-server service: a thin trio driver of ``triomq.namesrv.core.processor``.

Requests are answered inline by the pure core with ``trio.current_time()``
in ms (so tests run under a mock clock); a closed RPC connection removes
the brokers that registered on it; a loop scans for silent brokers every
``scan_not_active_broker_interval``; NOTIFY_MIN_BROKER_ID_CHANGE goes out
oneway, each in its own task, and a broker that cannot be reached is
skipped (it polls GET_BROKER_MEMBER_GROUP too). A master's vouch for its
state version (GET_BROKER_EPOCH_CACHE) is asked in a task of its own too,
and the answer, or None after ``VOUCH_TIMEOUT``, fed back to the core.

The KV config is read from ``<[store] path>/kvConfig.json`` at start and
written back whole (atomically, in a thread) after each PUT_KV_CONFIG or
DELETE_KV_CONFIG that changed it, before the request is answered, as
RocketMQ's ``KVConfigManager`` persists; those two run outside the inline
path so the write holds up no other request. Without a store path the
table lives in memory only. A ``kvConfig.json`` that cannot be read stops
the name server from starting rather than serving routes without the
ordered topics' configuration.
"""

from __future__ import annotations

import logging
import os
import weakref
from typing import TYPE_CHECKING

import trio

from triomq.clock import now_ms
from triomq.durable_files import replace_atomically
from triomq.errors import PluginError
from triomq.namesrv.core.config_properties import NamesrvFacts
from triomq.namesrv.core.kv_config import KVConfig, KVConfigError
from triomq.namesrv.core.processor import NameServerCore, RequestCode
from triomq.namesrv.core.route_info import MasterVouch
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


#: RocketMQ's file name for the KV config (``NamesrvConfig.kvConfigPath``).
KV_CONFIG_FILE = "kvConfig.json"

#: How long a master has to answer a vouch's GET_BROKER_EPOCH_CACHE (s).
VOUCH_TIMEOUT = 3.0

#: The requests that change the KV config, answered once it is saved.
_KV_WRITES = frozenset({RequestCode.PUT_KV_CONFIG, RequestCode.DELETE_KV_CONFIG})


def _load_kv(path: str | None) -> KVConfig:
    if path is None:
        return KVConfig()
    try:
        with open(path, "rb") as file:
            return KVConfig.decode(file.read())
    except FileNotFoundError:
        return KVConfig()
    except KVConfigError as exc:
        raise PluginError(f"name server KV config {path}: {exc}") from None


def _save_kv(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    replace_atomically(path, data)


def _listen_port(address: str) -> int | None:
    if not address.startswith("tcp://"):
        return None
    port = address.rpartition(":")[2]
    return int(port) if port.isdigit() else None


async def namesrv_service(node: Node, task_status: trio.TaskStatus[NameServerCore]) -> None:
    config: NamesrvConfig = node.config.section("namesrv")
    store = node.config.store.path
    kv_path = os.path.abspath(os.path.join(store, KV_CONFIG_FILE)) if store else None
    core = NameServerCore(config=config, kv=_load_kv(kv_path),
                          facts=NamesrvFacts(_listen_port(node.address), kv_path))
    saved_version = core.kv.version
    save_lock = trio.Lock()
    async with trio.open_nursery() as nursery:

        def send_requests() -> None:
            for address, command in core.take_notices():
                nursery.start_soon(_notify, node, address, command)
            for vouch, command in core.take_vouches():
                nursery.start_soon(ask_vouch, vouch, command)

        async def ask_vouch(vouch: MasterVouch, command: RemotingCommand) -> None:
            core.vouched(vouch, await _vouch_answer(node, vouch, command), now_ms())
            send_requests()  # the group's next question, if its master changed meanwhile

        async def handle(request: RemotingCommand, peer: RpcConnection) -> RemotingCommand:
            response = core.handle(request, peer, now_ms())
            send_requests()
            return response

        def closed(connection: RpcConnection) -> None:
            core.connection_closed(connection)
            send_requests()

        async def handle_kv_write(request: RemotingCommand,
                                  peer: RpcConnection) -> RemotingCommand:
            nonlocal saved_version
            response = core.handle(request, peer, now_ms())
            async with save_lock:
                # One write at a time, each of the table as it is by then: a write
                # that waited here saves the changes made meanwhile too.
                if kv_path is not None and core.kv.version != saved_version:
                    version = core.kv.version
                    await trio.to_thread.run_sync(_save_kv, kv_path, core.kv.encode())
                    saved_version = version
            return response

        def heard(request: RemotingCommand, peer: RpcConnection) -> None:
            fields = request.ext_fields
            core.route.touch(fields.get("clusterName", ""), fields.get("brokerAddr", ""),
                             now_ms())

        for code in sorted(core.codes - {RequestCode.BROKER_HEARTBEAT}):
            if code in _KV_WRITES:
                node.rpc_server.register(code, handle_kv_write)
            else:
                node.rpc_server.register(code, handle, inline=True)
        # A controller embedded in this node answers BROKER_HEARTBEAT (904) for
        # itself; the routes still count every heartbeat as a sign of life.
        node.rpc_server.register_fallback(RequestCode.BROKER_HEARTBEAT, handle, inline=True)
        node.rpc_server.observe(RequestCode.BROKER_HEARTBEAT, heard)
        node.rpc_server.on_connection_closed.append(closed)
        _cores[node] = core
        task_status.started(core)
        try:
            while True:
                # Read each time: UPDATE_NAMESRV_CONFIG may change it.
                await trio.sleep(core.config.scan_not_active_broker_interval / 1000)
                core.scan(now_ms())
                send_requests()
        finally:
            node.rpc_server.on_connection_closed.remove(closed)


async def _vouch_answer(node: Node, vouch: MasterVouch,
                        command: RemotingCommand) -> RemotingCommand | None:
    try:
        return await node.rpc.invoke(broker_rpc_address(vouch.address), command.code,
                                     command.ext_fields, timeout=VOUCH_TIMEOUT)
    except RpcError as exc:
        logger.info("master %s of %s did not vouch for state version %d: %s",
                    vouch.address, vouch.broker_name, vouch.state_version, exc)
        return None


async def _notify(node: Node, address: str, command: RemotingCommand) -> None:
    try:
        await node.rpc.invoke_oneway(broker_rpc_address(address), command.code,
                                     command.ext_fields, timeout=1.0)
    except RpcError as exc:
        logger.info("could not tell %s its group's smallest broker id changed: %s",
                    address, exc)
