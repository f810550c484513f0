"""Queue locks at run time: LOCK_BATCH_MQ 41 and UNLOCK_BATCH_MQ 42 over a ``LockTable``.

LOCK_BATCH_MQ answers ``{"lockOKMQSet": [...]}``: the queues the client
holds after the request (those it held, renewed, and those it took).
UNLOCK_BATCH_MQ answers SUCCESS with no body. Locks last
``rebalance_lock_max_live_time`` ms unless renewed; expired ones are
forgotten every such period. A bad body is INVALID_PARAMETER naming the
field. Locks live in memory only, as in RocketMQ: after a restart clients
lock again within their 20 s period.

With ``lock_in_strict_mode`` a lock (or an unlock) that is not
``onlyThisBroker`` also goes to the group's other replicas, and a queue is
locked only if a majority of ``total_replicas`` granted it
(``triomq.broker.consume.core.lock_quorum``); a replica that does not
answer within ``PEER_TIMEOUT`` grants nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio

from triomq.broker.config import BrokerConfig
from triomq.broker.consume.core.lock_body import LockBatchBody, encode_lock_ok, parse_lock_batch
from triomq.broker.consume.core.lock_quorum import (
    lock_quorum,
    peer_request_body,
    quorum_locked,
    wants_quorum,
)
from triomq.broker.consume.core.lock_table import LockTable
from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.client.core.wire import read_locked
from triomq.clock import now_ms
from triomq.errors import TriomqError
from triomq.protocol.heartbeat import BodyError
from triomq.protocol.message_queue import MessageQueue
from triomq.protocol.remoting import RemotingCommand
from triomq.rpc import RpcClient, RpcConnection, RpcError, RpcServer

__all__ = ["PEER_TIMEOUT", "QueueLockService"]

log = logging.getLogger("triomq.broker")

#: Seconds a replica has to answer a lock request in strict mode (RocketMQ waits 1 s).
PEER_TIMEOUT = 1.0


class QueueLockService:
    """Serves the queue-lock requests of orderly consumers."""

    def __init__(self, config: BrokerConfig, *, rpc: RpcClient | None = None,
                 peers: Callable[[], Awaitable[list[str]]] | None = None) -> None:
        self.table = LockTable(config.rebalance_lock_max_live_time)
        self.strict = config.lock_in_strict_mode
        self.total_replicas = config.total_replicas
        self.rpc = rpc
        #: The RPC addresses of the group's other replicas (strict mode).
        self.peers = peers

    def register(self, server: RpcServer) -> None:
        server.register(RequestCode.LOCK_BATCH_MQ, self.lock_batch, inline=True)
        server.register(RequestCode.UNLOCK_BATCH_MQ, self.unlock_batch, inline=True)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Forget expired locks every lock lifetime."""
        task_status.started()
        while True:
            await trio.sleep(self.table.max_live_time / 1000)
            self.table.expire(now_ms())

    async def lock_batch(self, request: RemotingCommand, peer: RpcConnection
                         ) -> RemotingCommand:
        try:
            body = parse_lock_batch(request.body)
        except BodyError as exc:
            return RemotingCommand.response(ResponseCode.INVALID_PARAMETER,
                                            remark=f"LOCK_BATCH_MQ: {exc}")
        locked = self.table.try_lock_batch(body.consumer_group, body.mqs, body.client_id,
                                           now_ms())
        if self._quorum(body):
            grants = [locked, *await self._ask_peers(RequestCode.LOCK_BATCH_MQ, body)]
            locked = quorum_locked(body.mqs, grants, lock_quorum(self.total_replicas))
        return RemotingCommand.response(body=encode_lock_ok(locked))

    async def unlock_batch(self, request: RemotingCommand, peer: RpcConnection
                           ) -> RemotingCommand:
        try:
            body = parse_lock_batch(request.body)
        except BodyError as exc:
            return RemotingCommand.response(ResponseCode.INVALID_PARAMETER,
                                            remark=f"UNLOCK_BATCH_MQ: {exc}")
        self.table.unlock_batch(body.consumer_group, body.mqs, body.client_id)
        if self._quorum(body):
            await self._ask_peers(RequestCode.UNLOCK_BATCH_MQ, body)
        return RemotingCommand.response()

    def _quorum(self, body: LockBatchBody) -> bool:
        return self.peers is not None and wants_quorum(
            body, strict=self.strict, total_replicas=self.total_replicas)

    async def _ask_peers(self, code: int, body: LockBatchBody) -> list[frozenset[MessageQueue]]:
        """Each other replica's grants of ``body`` (their own locks only)."""
        assert self.rpc is not None and self.peers is not None
        rpc, request = self.rpc, peer_request_body(body)
        grants: list[frozenset[MessageQueue]] = []

        async def ask(address: str) -> None:
            try:
                answer = await rpc.invoke(address, code, {}, request, timeout=PEER_TIMEOUT)
                if answer.code == ResponseCode.SUCCESS:
                    grants.append(read_locked(answer.body) if answer.body else frozenset())
            except (RpcError, TriomqError) as exc:
                log.info("queue lock request to replica %s failed: %s", address, exc)

        async with trio.open_nursery() as nursery:
            for address in await self.peers():
                nursery.start_soon(ask, address)
        return grants
