"""A producer without routes: send messages to one broker's address, for tests.

``triomq.client.Producer`` is the producer: it finds masters through the
name servers and retries through a failover. Tests and benchmarks that must
reach one broker whatever its role (a slave's refusal, a master's answer
under a fault) send with this one instead::

    async with triomq.open_node(config) as node:
        producer = DirectProducer(node.rpc, "tcp://10.0.0.1:10911")
        result = await producer.send("orders", b"...", tags="paid", keys="o-1")
        result.physical_offset

A non-success answer raises a ``SendError`` subclass named after the code;
``FlushSlaveTimeout`` and ``FlushDiskTimeout`` carry the ``DirectSendResult`` of
the message the master did store.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping

import attrs

from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.broker.core.headers import SendHeader, encode_send_header, parse_offset_msg_id
from triomq.errors import TriomqError
from triomq.protocol.remoting import RemotingCommand
from triomq.rpc import DEFAULT_TIMEOUT, RpcClient

__all__ = [
    "DirectProducer",
    "DirectSendResult",
    "FlushDiskTimeout",
    "FlushSlaveTimeout",
    "SendError",
    "ServiceNotAvailable",
]


@attrs.frozen
class DirectSendResult:
    """Where a message went: ids, queue and commit-log offsets."""

    msg_id: str
    offset_msg_id: str
    queue_id: int
    queue_offset: int
    physical_offset: int


class SendError(TriomqError):
    """The broker answered a send with ``code`` (not SUCCESS); ``remark`` says why."""

    def __init__(self, address: str, code: int, remark: str | None,
                 result: DirectSendResult | None = None) -> None:
        self.address = address
        self.code = code
        self.remark = remark
        #: Where the message was stored, when the broker stored it.
        self.result = result
        name = ResponseCode(code).name if code in set(ResponseCode) else str(code)
        super().__init__(f"send to {address}: {name} ({code}): {remark or 'no remark'}")


class FlushSlaveTimeout(SendError):
    """Stored on the master, not acked by enough replicas in time."""


class FlushDiskTimeout(SendError):
    """Stored on the master, not flushed to disk in time."""


class ServiceNotAvailable(SendError):
    """The broker does not take messages now (e.g. it is a slave)."""


_ERRORS: Mapping[int, type[SendError]] = {
    ResponseCode.FLUSH_SLAVE_TIMEOUT: FlushSlaveTimeout,
    ResponseCode.FLUSH_DISK_TIMEOUT: FlushDiskTimeout,
    ResponseCode.SERVICE_NOT_AVAILABLE: ServiceNotAvailable,
}


class DirectProducer:
    """Sends messages to the broker at ``address`` with ``rpc`` (e.g. ``node.rpc``)."""

    def __init__(self, rpc: RpcClient, address: str, *, group: str = "DEFAULT_PRODUCER",
                 timeout: float = DEFAULT_TIMEOUT) -> None:
        self.rpc = rpc
        self.address = address
        self.group = group
        self.timeout = timeout

    async def send(self, topic: str, body: bytes, *, tags: str | None = None,
                   keys: str | None = None, queue_id: int = 0,
                   properties: Mapping[str, str] | None = None) -> DirectSendResult:
        """Send one message (SEND_MESSAGE_V2) and return where it was stored.

        Raises a ``SendError`` for a non-success answer, and the RPC errors
        (``RpcTimeout``, ``RpcConnectionError``) when no answer comes.
        """
        msg_id = uuid.uuid4().hex.upper()
        props = dict(properties or {})
        if tags is not None:
            props["TAGS"] = tags
        if keys is not None:
            props["KEYS"] = keys
        props["UNIQ_KEY"] = msg_id
        # Born when sent (ms, as RocketMQ's producer); the broker records the
        # born host, this producer's address as its connection shows it.
        header = SendHeader(topic=topic, producer_group=self.group, queue_id=queue_id,
                            born_timestamp=time.time_ns() // 1_000_000, properties=props)
        response = await self.rpc.invoke(self.address, RequestCode.SEND_MESSAGE_V2,
                                         encode_send_header(header), body,
                                         timeout=self.timeout)
        result = _result(msg_id, response)
        if response.code != ResponseCode.SUCCESS:
            error = _ERRORS.get(response.code, SendError)
            raise error(self.address, response.code, response.remark, result)
        if result is None:
            raise SendError(self.address, response.code, "the answer has no msgId")
        return result


def _result(msg_id: str, response: RemotingCommand) -> DirectSendResult | None:
    fields = response.ext_fields
    offset_id = fields.get("msgId")
    if offset_id is None:
        return None
    _host, physical_offset = parse_offset_msg_id(offset_id)
    return DirectSendResult(
        msg_id=msg_id,
        offset_msg_id=offset_id,
        queue_id=int(fields.get("queueId", "0")),
        queue_offset=int(fields.get("queueOffset", "0")),
        physical_offset=physical_offset,
    )
