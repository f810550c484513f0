"""Requests the broker passes on to one consumer, pure: RocketMQ's ``callConsumer`` rules.

GET_CONSUMER_RUNNING_INFO (307) is how ``mqadmin consumerStatus`` asks a
consumer what it runs: the admin tool cannot reach the client, the broker
the client heartbeats to can. The header names the group
(``consumerGroup``) and the client (``clientId``); ``jstackEnable`` asks
the client for its thread dump. The broker passes the request, header
fields and body unchanged, to the connection that client's heartbeats came
on (``ClientTable.find_consumer``) and answers with the client's response
whole: its code, remark, fields and body (a ``ConsumerRunningInfo``: RocketMQ's
Java consumers and triomq's, ``triomq.client.core.running_info``, answer).

When it cannot, the broker answers as RocketMQ's does:

- the client is not connected in the group: SYSTEM_ERROR,
  ``The Consumer <G> <id> not online``;
- its heartbeat's version is older than RocketMQ 3.1.8's, the first client
  that answers: SYSTEM_ERROR, ``The Consumer <id> Version <v> too low to
  finish, please upgrade it to V3_1_8_SNAPSHOT`` (``v`` as a number where
  RocketMQ names the release);
- no answer within ``CALL_TIMEOUT`` (RocketMQ's 10 s): CONSUME_MSG_TIMEOUT,
  ``consumer <G> <id> Timeout: <why>``;
- the connection fails first: SYSTEM_ERROR,
  ``invoke consumer <G> <id> Exception: <why>``.

CONSUME_MESSAGE_DIRECTLY (309) is how ``mqadmin queryMsgById -i ID -g G -d
CLIENT`` has a push consumer consume one stored message again: the header
names the group, the client and the message (``msgId``, the offset message
id of a record this broker stores); the broker passes it on by the same
rules with the record's stored bytes as the body and, as RocketMQ's adds
them, ``brokerName`` and the topic's and the group's sysFlags when it holds
their configs (``direct_consume_fields``). The client answers with a
``ConsumeMessageDirectlyResult``.

A header without the group or the client (or, for 309, the message id) is
INVALID_PARAMETER naming the field (RocketMQ would fail the decoding with
SYSTEM_ERROR).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

import attrs

from triomq.broker.consume.core.client_table import ClientTable
from triomq.broker.core.codes import ResponseCode
from triomq.protocol.header_fields import HeaderFields

__all__ = ["CALL_TIMEOUT", "MIN_CLIENT_VERSION", "CallRefused", "ConsumerCall",
           "call_failed", "call_timed_out", "consumer_to_call", "direct_consume_fields",
           "parse_consumer_call"]

#: Seconds the broker waits for the client's answer (RocketMQ's Broker2Client.callClient).
CALL_TIMEOUT = 10.0
#: RocketMQ's version number of V3_1_8_SNAPSHOT, the first client that answers.
MIN_CLIENT_VERSION = 62
#: Characters of a group or client id a remark quotes.
_QUOTED = 200


@attrs.frozen
class ConsumerCall:
    """Which consumer a request is for."""

    group: str
    client_id: str

    def __str__(self) -> str:
        return f"<{self.group[:_QUOTED]}> <{self.client_id[:_QUOTED]}>"


@attrs.frozen
class CallRefused:
    """Why the request is not passed on: the broker's answer."""

    code: int
    remark: str


def parse_consumer_call(fields: Mapping[str, str], what: str) -> ConsumerCall:
    """The request's group and client; ``HeaderFieldError`` names a missing or bad field."""
    header = HeaderFields(fields, what)
    call = ConsumerCall(header.string("consumerGroup"), header.string("clientId"))
    header.boolean("jstackEnable")  # only checked: the client reads it
    return call


def direct_consume_fields(fields: Mapping[str, str], *, broker_name: str,
                          topic_sys_flag: int | None, group_sys_flag: int | None
                          ) -> dict[str, str]:
    """CONSUME_MESSAGE_DIRECTLY's header as the client gets it: the admin tool's, with
    the broker's name and the sysFlags of the topic and the group (None: no config)."""
    passed = {**fields, "brokerName": broker_name}
    if topic_sys_flag is not None:
        passed["topicSysFlag"] = str(topic_sys_flag)
    if group_sys_flag is not None:
        passed["groupSysFlag"] = str(group_sys_flag)
    return passed


def consumer_to_call(table: ClientTable, call: ConsumerCall) -> Hashable | CallRefused:
    """The connection to pass the request on to, or why there is none."""
    found = table.find_consumer(call.group, call.client_id)
    if found is None:
        return CallRefused(ResponseCode.SYSTEM_ERROR, f"The Consumer {call} not online")
    channel, client = found
    if client.origin.version < MIN_CLIENT_VERSION:
        return CallRefused(ResponseCode.SYSTEM_ERROR, (
            f"The Consumer <{call.client_id[:_QUOTED]}> Version <{client.origin.version}> "
            f"too low to finish, please upgrade it to V3_1_8_SNAPSHOT"))
    return channel


def call_timed_out(call: ConsumerCall, reason: str) -> CallRefused:
    """The client did not answer in time."""
    return CallRefused(ResponseCode.CONSUME_MSG_TIMEOUT, f"consumer {call} Timeout: {reason}")


def call_failed(call: ConsumerCall, reason: str) -> CallRefused:
    """The connection to the client failed before it answered."""
    return CallRefused(ResponseCode.SYSTEM_ERROR,
                       f"invoke consumer {call} Exception: {reason}")
