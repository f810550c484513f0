"""Helpers: static broker groups with acting masters beside a name server, inproc or TCP
(the groups are ``triomq.testing.static_groups``'s, which the acting-master demo runs too)."""

from __future__ import annotations

import json

import trio

from triomq.broker.core.escape_bridge import EscapeResult
from triomq.broker.core.headers import parse_offset_msg_id
from triomq.broker.service import Broker
from triomq.protocol.message import MessageRecord
from triomq.testing.static_groups import Groups, acting_namesrv, open_static_groups

__all__ = ["Groups", "SlaveBridgeTarget", "acting_namesrv", "create_topic",
           "open_static_groups", "route", "wait_for"]

GET_ROUTEINFO_BY_TOPIC = 105
CREATE_TOPIC = 17


async def route(client, namesrv: str, topic: str) -> dict:
    answer = await client.rpc.invoke(namesrv, GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    assert answer.code == 0, answer.remark
    return json.loads(answer.body)


async def create_topic(client, address: str, topic: str, queues: int = 2) -> None:
    fields = {"topic": topic, "readQueueNums": str(queues), "writeQueueNums": str(queues),
              "perm": "6"}
    answer = await client.rpc.invoke(address, CREATE_TOPIC, fields)
    assert answer.code == 0, answer.remark


async def wait_for(predicate, timeout: float = 20.0) -> None:
    """Poll ``predicate`` until it holds (a liveness bound, never a timing assertion)."""
    with trio.fail_after(timeout):
        while not await predicate():
            await trio.sleep(0.02)


class SlaveBridgeTarget:
    """The escape-bridge conformance suite's target: bridge ``name`` of ``slave``, onto
    ``master`` (None: no master it can reach)."""

    def __init__(self, name: str, slave: Broker, master: Broker | None, *,
                 max_message_size: int, keeps_born_host: bool = True) -> None:
        self.master = master
        self.bridge = slave.node.plugins.escape_bridge(name)(slave.node)
        self.max_message_size = max_message_size
        self.keeps_born_host = keeps_born_host

    async def stored(self, result: EscapeResult) -> MessageRecord:
        assert self.master is not None and result.msg_id is not None
        _host, offset = parse_offset_msg_id(result.msg_id)
        return self.master.log.read_record(offset)

    async def end_offset(self) -> int:
        return 0 if self.master is None else self.master.log.max_offset
