"""Queue locks at run time: LOCK_BATCH_MQ 41 and UNLOCK_BATCH_MQ 42 over a ``LockTable``.

LOCK_BATCH_MQ answers ``{"lockOKMQSet": [...]}``: the queues the client
holds after the request (those it held, renewed, and those it took).
UNLOCK_BATCH_MQ answers SUCCESS with no body. Locks last
``rebalance_lock_max_live_time`` ms unless renewed; expired ones are
forgotten every such period. A bad body is INVALID_PARAMETER naming the
field. Locks live in memory only, as in RocketMQ: after a restart clients
lock again within their 20 s period.
"""

from __future__ import annotations

import trio

from triomq.broker.config import BrokerConfig
from triomq.broker.consume.core.lock_body import encode_lock_ok, parse_lock_batch
from triomq.broker.consume.core.lock_table import LockTable
from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.clock import now_ms
from triomq.protocol.heartbeat import BodyError
from triomq.protocol.remoting import RemotingCommand
from triomq.rpc import RpcConnection, RpcServer

__all__ = ["QueueLockService"]


class QueueLockService:
    """Serves the queue-lock requests of orderly consumers."""

    def __init__(self, config: BrokerConfig) -> None:
        self.table = LockTable(config.rebalance_lock_max_live_time)

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
        return RemotingCommand.response(body=encode_lock_ok(locked))

    async def unlock_batch(self, request: RemotingCommand, peer: RpcConnection
                           ) -> RemotingCommand:
        try:
            body = parse_lock_batch(request.body)
        except BodyError as exc:
            return RemotingCommand.response(ResponseCode.INVALID_PARAMETER,
                                            remark=f"UNLOCK_BATCH_MQ: {exc}")
        self.table.unlock_batch(body.consumer_group, body.mqs, body.client_id)
        return RemotingCommand.response()
