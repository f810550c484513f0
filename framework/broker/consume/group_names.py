"""Group names in request headers, checked by RocketMQ's rules before any handler runs.

Every request whose header names a consumer or producer group has the name
checked as topics are (``triomq.protocol.topic_rules.check_group``: 1 to
120 characters of ``%|a-zA-Z0-9_-``), so a name such as ``../x``, one
holding a NUL or one of 300 characters is answered INVALID_PARAMETER with
RocketMQ's remark and never reaches a table, ``config/consumerOffset.json``
or a log line. A field that is absent or empty is left to the handler,
which knows whether it is required. Groups in bodies (HEART_BEAT,
LOCK_BATCH_MQ, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP) are checked where the
body is read; the send header's producer group by the send's own checks.
"""

from __future__ import annotations

from collections.abc import Mapping

from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.topic_rules import IllegalName, check_group
from triomq.rpc import RpcServer

__all__ = ["GROUP_FIELDS", "check_group_fields", "register_group_checks"]

_CONSUMER = ("consumerGroup",)

#: The header fields naming a group, by the request codes that carry them.
GROUP_FIELDS: Mapping[int, tuple[str, ...]] = {
    RequestCode.PULL_MESSAGE: _CONSUMER,
    RequestCode.LITE_PULL_MESSAGE: _CONSUMER,
    RequestCode.QUERY_CONSUMER_OFFSET: _CONSUMER,
    RequestCode.UPDATE_CONSUMER_OFFSET: _CONSUMER,
    RequestCode.UNREGISTER_CLIENT: ("producerGroup", "consumerGroup"),
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: _CONSUMER,
    RequestCode.GET_CONSUMER_CONNECTION_LIST: _CONSUMER,
    RequestCode.GET_PRODUCER_CONNECTION_LIST: ("producerGroup",),
    RequestCode.DELETE_SUBSCRIPTIONGROUP: ("groupName",),
    RequestCode.GET_CONSUME_STATS: _CONSUMER,
    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: ("group",),
    RequestCode.GET_CONSUMER_RUNNING_INFO: _CONSUMER,
    RequestCode.CONSUME_MESSAGE_DIRECTLY: _CONSUMER,
}


def check_group_fields(request: RemotingCommand) -> RemotingCommand | None:
    """INVALID_PARAMETER if a group the request's header names breaks RocketMQ's rules."""
    fields = request.ext_fields
    for key in GROUP_FIELDS.get(request.code, ()):
        name = fields.get(key)
        if not name:
            continue
        try:
            check_group(name)
        except IllegalName as exc:
            return RemotingCommand.response(ResponseCode.INVALID_PARAMETER,
                                            remark=f"header field {key!r}: {exc}")
    return None


def register_group_checks(server: RpcServer) -> None:
    """Have ``server`` check the groups of every request in ``GROUP_FIELDS``."""
    server.check(GROUP_FIELDS, check_group_fields)
