"""Helpers: static broker groups with acting masters beside a name server, inproc or TCP
(the groups are ``triomq.testing.static_groups``'s, which the acting-master demo runs too)."""

from __future__ import annotations

import json

import trio

from triomq.testing.static_groups import Groups, acting_namesrv

__all__ = ["Groups", "acting_namesrv", "create_topic", "route", "wait_for"]

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
