"""A thin trio pump of ``triomq.broker.registration.core.namesrv_registration.RegistrationFlow``.

``query_route`` asks the name servers for a topic's route, as a broker's own
services do (the remote escape bridge, the revive of another group's pops).

It sleeps until the flow's next wake-up or an input (a role or topic
change), sends what ``poll`` returns over the node's RPC client, each in a
task of its own, and reports every outcome back. A registration's answer
names the group's master (``masterAddr``) for a slave, which a slave
copies its topic configs from. Stopping needs no UNREGISTER_BROKER: the
broker's connections close, and a name server drops the brokers of a
closed connection at once.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence

import trio

from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.broker.metadata.core.topic_table import TopicTable
from triomq.broker.registration.core.namesrv_registration import (
    BrokerRegistrationInfo,
    Heartbeat,
    Register,
    RegistrationFlow,
    request_for,
)
from triomq.clock import now_ms
from triomq.errors import TriomqError
from triomq.protocol.route import TopicRouteData
from triomq.rpc import RpcClient, RpcError
from triomq.transport import split_address

__all__ = ["NamesrvClient", "query_route", "route_address", "rpc_address"]

log = logging.getLogger("triomq.broker")

#: Seconds a registration waits for its answer (a heartbeat: ``heartbeat_timeout``).
REQUEST_TIMEOUT = 3.0


def rpc_address(address: str) -> str:
    """A name server's address as the RPC client dials it (RocketMQ's carry no scheme)."""
    return address if "://" in address else f"tcp://{address}"


async def query_route(rpc: RpcClient, namesrvs: Sequence[str], topic: str, *,
                      timeout: float = REQUEST_TIMEOUT) -> TopicRouteData | None:
    """``topic``'s route from the first of ``namesrvs`` that gives one (None: none did)."""
    for namesrv in namesrvs:
        try:
            answer = await rpc.invoke(rpc_address(namesrv), RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                      {"topic": topic}, timeout=timeout)
            if answer.code == ResponseCode.SUCCESS:
                return TopicRouteData.decode(answer.body or b"")
        except (RpcError, TriomqError):
            continue
    return None


def route_address(address: str) -> str:
    """A TCP address as RocketMQ's routes carry it (``host:port``); others keep their scheme."""
    scheme, location = split_address(address) if "://" in address else ("", address)
    return location if scheme == "tcp" else address


class NamesrvClient:
    """Registers the broker with its name servers and keeps it registered."""

    def __init__(self, rpc: RpcClient, flow: RegistrationFlow,
                 topics: Callable[[], TopicTable], *, heartbeat_timeout: float = 1.0) -> None:
        self.rpc = rpc
        self.heartbeat_timeout = heartbeat_timeout
        self.flow = flow
        self.topics = topics
        self._wake = trio.Event()

    @property
    def master_address(self) -> str | None:
        """The group's master as the last registration answer named it (``host:port``)."""
        return self.flow.master_address

    def identify(self, info: BrokerRegistrationInfo) -> None:
        self.flow.identify(info, now_ms())
        self._wake.set()

    def topics_changed(self) -> None:
        self.flow.topics_changed(now_ms())
        self._wake.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        async with trio.open_nursery() as nursery:
            task_status.started()
            while True:
                for sent in self.flow.poll(now_ms()):
                    nursery.start_soon(self._send, sent)
                wakeup = self.flow.next_wakeup()
                with trio.move_on_at(math.inf if wakeup is None else wakeup / 1000):
                    await self._wake.wait()
                self._wake = trio.Event()

    async def _send(self, sent: Register | Heartbeat) -> None:
        request = request_for(sent, self.topics())
        answer = None
        try:
            answer = await self.rpc.invoke(rpc_address(sent.namesrv), request.code,
                                           request.ext_fields, request.body,
                                           timeout=REQUEST_TIMEOUT
                                           if isinstance(sent, Register)
                                           else self.heartbeat_timeout)
        except RpcError as exc:
            log.info("%s to name server %s failed: %s", type(sent).__name__.lower(),
                     sent.namesrv, exc)
        else:
            if answer.code != 0:
                log.info("name server %s refused %s: %s", sent.namesrv,
                         type(sent).__name__.lower(), answer.remark)
        self.flow.replied(sent, answer, now_ms())
        self._wake.set()
