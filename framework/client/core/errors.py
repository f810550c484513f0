"""What producers and consumers raise (RocketMQ's ``MQClientException`` and
``MQBrokerException``); calls that get no answer raise the RPC errors
(``RpcTimeout``, ``RpcConnectionError``) as RocketMQ's raise ``RemotingException``."""

from __future__ import annotations

from triomq.client.core.codes import code_name
from triomq.errors import TriomqError

__all__ = ["BrokerError", "ClientError", "NoRouteError"]


class ClientError(TriomqError):
    """A client cannot do what it was asked."""


class NoRouteError(ClientError):
    """No name server knows a route to the topic, or it names no queue to use now."""


class BrokerError(ClientError):
    """A broker answered ``code`` (not a success); ``remark`` says why."""

    def __init__(self, address: str, code: int, remark: str | None) -> None:
        self.address = address
        self.code = code
        self.remark = remark
        super().__init__(f"{address}: {code_name(code)}: {remark or 'no remark'}")
