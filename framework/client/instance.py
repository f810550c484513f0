"""What a producer or consumer shares with the cluster: RocketMQ's ``MQClientInstance``.

A ``ClientInstance`` holds the RPC client, the name servers and what they
said: each topic's route and each broker group's addresses by broker id.
Routes come from GET_ROUTEINFO_BY_TOPIC on one name server at a time (the
next one after a failure), kept until refreshed: every
``poll_name_server_interval`` (RocketMQ's 30 s) by the owner's loop, and at
once when a request shows the route is stale. Addresses as routes carry
them (``host:port`` for TCP, in-process ones with their scheme) are dialled
as ``tcp://host:port`` or as they are.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import socket
from collections.abc import Mapping, Sequence

import trio

from triomq.client.core.codes import RequestCode, ResponseCode
from triomq.client.core.errors import BrokerError
from triomq.client.core.queue_pull import subscribe_broker
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.route import MASTER_ID, RouteDataError, TopicRouteData
from triomq.rpc import DEFAULT_TIMEOUT, RpcClient, RpcConnection, RpcError, RpcTimeout

__all__ = ["ClientInstance", "default_instance_name", "dial_address", "local_ip"]

log = logging.getLogger("triomq.client")

_instances = itertools.count(1)


def dial_address(address: str) -> str:
    """An address from a route or the user, as the RPC client dials it."""
    return address if "://" in address else f"tcp://{address}"


@functools.cache
def local_ip() -> str:
    """This host's outward IPv4 address (no packet is sent), or 127.0.0.1."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: never routed anywhere
            return str(probe.getsockname()[0])
    except OSError:
        return "127.0.0.1"


def default_instance_name() -> str:
    """``pid#n``: unique per client in this process (RocketMQ uses pid#nanoTime)."""
    return f"{os.getpid()}#{next(_instances)}"


class ClientInstance:
    """Routes and broker addresses for one client, over ``rpc``."""

    def __init__(self, rpc: RpcClient, namesrv_addrs: Sequence[str], client_id: str, *,
                 timeout: float = DEFAULT_TIMEOUT) -> None:
        if not namesrv_addrs:
            raise ValueError("a client needs at least one name server address")
        self.rpc = rpc
        self.namesrv_addrs = [dial_address(a) for a in namesrv_addrs]
        self.client_id = client_id
        self.timeout = timeout
        #: Each topic's last route.
        self.routes: dict[str, TopicRouteData] = {}
        #: Each broker group's addresses by broker id, from the routes (dialable).
        self.brokers: dict[str, dict[int, str]] = {}
        self._namesrv = 0
        self._connections: dict[str, RpcConnection] = {}
        self._opening: dict[str, trio.Lock] = {}

    async def update_route(self, topic: str) -> TopicRouteData | None:
        """Fetch ``topic``'s route; ``None`` if no name server knows the topic.

        Raises the last ``RpcError`` if no name server answers.
        """
        error: RpcError | None = None
        for _ in range(len(self.namesrv_addrs)):
            address = self.namesrv_addrs[self._namesrv % len(self.namesrv_addrs)]
            try:
                answer = await self.invoke(address, RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                           {"topic": topic})
            except RpcError as exc:
                log.info("name server %s: %s", address, exc)
                error = exc
                self._namesrv += 1
                continue
            if answer.code == ResponseCode.TOPIC_NOT_EXIST:
                return None
            if answer.code != ResponseCode.SUCCESS:
                raise BrokerError(address, answer.code, answer.remark)
            try:
                route = TopicRouteData.decode(answer.body)
            except RouteDataError as exc:
                raise BrokerError(address, answer.code, f"bad route: {exc}") from None
            self.learn_route(topic, route)
            return route
        assert error is not None
        raise error

    def learn_route(self, topic: str, route: TopicRouteData) -> None:
        """Keep ``route`` as ``topic``'s, and its brokers' addresses (fetched by
        ``update_route``, or by a caller that asked the name servers itself)."""
        self.routes[topic] = route
        for broker in route.broker_datas:
            self.brokers[broker.broker_name] = {i: dial_address(a)
                                                for i, a in broker.broker_addrs.items()}

    def master_address(self, broker_name: str) -> str | None:
        """The group's master as the last route named it."""
        return self.brokers.get(broker_name, {}).get(MASTER_ID)

    def subscribe_address(self, broker_name: str, broker_id: int = MASTER_ID) -> str | None:
        """Broker ``broker_id`` of the group, else its master, else any of it
        (``findBrokerAddressInSubscribe``)."""
        return subscribe_broker(self.brokers.get(broker_name, {}), broker_id)

    def broker_addresses(self, topics: Sequence[str]) -> Mapping[str, dict[int, str]]:
        """Every group that holds one of ``topics``, with its addresses."""
        names = {b.broker_name for t in topics if t in self.routes
                 for b in self.routes[t].broker_datas}
        return {n: self.brokers[n] for n in sorted(names) if n in self.brokers}

    async def connection(self, address: str, timeout: float | None = None) -> RpcConnection:
        """The open connection to ``address``, opened by one task at a time.

        ``RpcClient`` hands out a connection it is still opening to a second
        caller, whose first write may then meet the opening's (a transport's
        ``BusyResourceError``); this client's tasks wait for the opening instead.
        """
        connection = self._connections.get(address)
        if connection is not None and not connection.closed:
            return connection
        deadline = trio.current_time() + (self.timeout if timeout is None else timeout)
        with trio.move_on_at(deadline):
            async with self._opening.setdefault(address, trio.Lock()):
                connection = self._connections.get(address)
                if connection is None or connection.closed:
                    connection = await self.rpc.connection(address, deadline=deadline)
                    self._connections[address] = connection
                return connection
        raise RpcTimeout(f"{address}: not connected in time")

    async def invoke(self, address: str, code: int, fields: Mapping[str, str],
                     body: bytes = b"", *, timeout: float | None = None) -> RemotingCommand:
        timeout = self.timeout if timeout is None else timeout
        deadline = trio.current_time() + timeout
        connection = await self.connection(address, timeout)
        return await connection.invoke(code, fields, body,
                                       timeout=max(0.0, deadline - trio.current_time()))

    async def checked(self, address: str, code: int, fields: Mapping[str, str],
                      body: bytes = b"", *, timeout: float | None = None) -> RemotingCommand:
        """``invoke``, raising ``BrokerError`` for an answer other than SUCCESS."""
        answer = await self.invoke(address, code, fields, body, timeout=timeout)
        if answer.code != ResponseCode.SUCCESS:
            raise BrokerError(address, answer.code, answer.remark)
        return answer
