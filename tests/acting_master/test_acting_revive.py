"""Pop revive while a slave acts for its absent master, under trio's ``MockClock``.

A consumer pops a message from a0 (POP_MESSAGE built by hand) and never acks
it; a0 stops, a1 acts. a1 revives it from its own revive topic once its
invisible time is over: the copy goes through the acting escape bridge
(``container`` in the same process, ``remote`` over TCP) into the group's
pop retry topic on b0, which the group pops there (b0 holds that retry topic,
as a master where the group pops does). a1's commit log never moves. (Pops
served by a1 itself are ``test_acting_pop.py``'s.) The waits are liveness bounds.
"""

from __future__ import annotations

import json

import pytest
from acting_nodes import (
    GET_ROUTEINFO_BY_TOPIC,
    create_topic,
    open_static_groups,
    wait_for,
)
from trio.testing import MockClock

from triomq.client.core.message import decode_messages

SEND_MESSAGE_V2, POP_MESSAGE = 310, 200050
SUCCESS = 0
RETRY_TOPIC = "%RETRY%cg_orders"


@pytest.fixture
def autojump() -> MockClock:
    """Mock time that jumps ahead when every task waits (over TCP too)."""
    return MockClock(autojump_threshold=0)


def pop_fields(invisible: int) -> dict[str, str]:
    """PopMessageRequestHeader, as RocketMQ 5's clients send it."""
    return {"consumerGroup": "cg", "topic": "orders", "queueId": "-1", "maxMsgNums": "32",
            "invisibleTime": str(invisible), "pollTime": "0", "bornTime": "1700000000000",
            "initMode": "1", "expType": "TAG", "exp": "*", "order": "false"}


def send_fields() -> dict[str, str]:
    return {"a": "pg", "b": "orders", "c": "TBW102", "d": "4", "e": "0", "f": "0",
            "g": "1700000000000", "h": "0", "i": "TAGS\x01t\x02", "j": "0", "k": "false"}


async def routed(client, namesrv: str, topic: str, groups: int) -> None:
    async def holds() -> bool:
        answer = await client.rpc.invoke(namesrv, GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        return (answer.code == SUCCESS
                and len(json.loads(answer.body)["brokerDatas"]) == groups)
    await wait_for(holds)


@pytest.mark.parametrize(("transport", "bridges"), [
    ("inproc", ["container"]), ("tcp", ["container"]), ("tcp", ["remote"])])
async def test_an_unacked_pop_is_revived_onto_another_master(tmp_path, transport, bridges,
                                                             autojump):
    async with open_static_groups(tmp_path, ("a0", "a1", "b0"), transport=transport,
                                  acting_escape_bridges=bridges,
                                  enable_remote_escape="remote" in bridges,
                                  revive_interval=500) as (cluster, _):
        (namesrv,) = cluster.namesrv_addresses.values()
        client = await cluster.start("client")
        a0, b0 = (cluster.node(name).address for name in ("a0", "b0"))
        await create_topic(client, a0, "orders")
        await create_topic(client, b0, "orders")
        await create_topic(client, b0, RETRY_TOPIC, queues=1)
        await routed(client, namesrv, RETRY_TOPIC, 1)
        await routed(client, namesrv, "orders", 2)

        sent = await client.rpc.invoke(a0, SEND_MESSAGE_V2, send_fields(), b"unacked")
        assert sent.code == SUCCESS, sent.remark
        master, slave = cluster.broker("a0"), cluster.broker("a1")
        # Pops read what the group's replicas hold.
        await cluster.wait_for(lambda: master.replicas.confirm_offset == master.log.max_offset)
        popped = await client.rpc.invoke(a0, POP_MESSAGE, pop_fields(invisible=3000))
        assert popped.code == SUCCESS, popped.remark
        assert [m.body for m in decode_messages(popped.body)] == [b"unacked"]

        await cluster.wait_for(lambda: slave.replicas.confirm_offset == master.log.max_offset)
        await cluster.kill("a0")
        await cluster.wait_for(lambda: slave.acting, timeout=30)
        held = slave.log.max_offset

        other = cluster.broker("b0")
        await cluster.wait_for(lambda: any(
            r.topic == RETRY_TOPIC for r in other.log.iter_records()), timeout=60)
        (revived,) = [r for r in other.log.iter_records() if r.topic == RETRY_TOPIC]
        assert revived.body == b"unacked"
        # The group pops it from b0.
        again = await client.rpc.invoke(b0, POP_MESSAGE, pop_fields(invisible=60_000))
        assert again.code == SUCCESS, again.remark
        assert [m.body for m in decode_messages(again.body)] == [b"unacked"]
        # The acting slave wrote nothing.
        assert slave.log.max_offset == held
