"""Pops served by a slave acting for its absent master, under trio's ``MockClock``.

a0 stops and a1 acts. A consumer pops a0's messages from a1 (POP_MESSAGE and
ACK_MESSAGE built by hand, as in ``tests/broker/test_pop_wire.py``): a1 answers
from its replica, moves its own pop offsets and escapes the pop's checkpoint
and the ack through its acting bridge (``container`` in the same process,
``remote`` over TCP) into b0's revive topic, never its own log. b0 revives what
was not acked in time, reading the message from a1 over PULL_MESSAGE, into the
group's pop retry topic on b0, where the group pops it; the acked one never
comes back. The waits are liveness bounds.
"""

from __future__ import annotations

import pytest
from acting_nodes import create_topic, open_static_groups, route, wait_for
from test_acting_revive import pop_fields, send_fields
from trio.testing import MockClock

from triomq.broker.pop.core.receipt import REVIVE_GROUP
from triomq.client.core.message import decode_messages

ACK_MESSAGE, SEND_MESSAGE_V2, POP_MESSAGE = 200051, 310, 200050
CHANGE_MESSAGE_INVISIBLETIME = 200053
SUCCESS, POLLING_TIMEOUT, SERVICE_NOT_AVAILABLE = 0, 210, 14
RETRY_TOPIC = "%RETRY%cg_orders"
REVIVE_TOPIC = "rmq_sys_REVIVE_LOG_DefaultCluster"


@pytest.fixture
def autojump() -> MockClock:
    """Mock time that jumps ahead when every task waits (over TCP too)."""
    return MockClock(autojump_threshold=0)


def handle(fields: dict[str, str], queue_offset: int) -> str:
    """A popped message's receipt handle, as RocketMQ's client builds it from the answer's
    ``startOffsetInfo`` (``kind queueId startOffset``)."""
    kind, queue_id, start = fields["startOffsetInfo"].split(" ")
    return " ".join([start, fields["popTime"], fields["invisibleTime"], fields["reviveQid"],
                     kind, "broker-a", queue_id, str(queue_offset)])


def ack_fields(queue_offset: int, extra: str, **more: str) -> dict[str, str]:
    return {"consumerGroup": "cg", "topic": "orders", "queueId": "0",
            "offset": str(queue_offset), "extraInfo": extra, **more}


@pytest.mark.parametrize(("transport", "bridges"), [
    ("inproc", ["container"]), ("tcp", ["container"]), ("tcp", ["remote"])])
async def test_an_acting_slave_pops_and_another_master_revives_what_was_not_acked(
        tmp_path, transport, bridges, autojump):
    async with open_static_groups(tmp_path, ("a0", "a1", "b0"), transport=transport,
                                  acting_escape_bridges=bridges,
                                  enable_remote_escape="remote" in bridges,
                                  revive_interval=500) as (cluster, _):
        (namesrv,) = cluster.namesrv_addresses.values()
        client = await cluster.start("client")
        a0, a1, b0 = (cluster.node(name).address for name in ("a0", "a1", "b0"))
        await create_topic(client, a0, "orders")
        await create_topic(client, b0, "orders")
        for body in (b"m0", b"m1", b"m2"):
            sent = await client.rpc.invoke(a0, SEND_MESSAGE_V2, send_fields(), body)
            assert sent.code == SUCCESS, sent.remark
        master, slave, other = (cluster.broker(name) for name in ("a0", "a1", "b0"))

        async def b0_takes_revive_records() -> bool:  # the remote bridge follows the route
            brokers = (await route(client, namesrv, REVIVE_TOPIC))["brokerDatas"]
            return "broker-b" in {b["brokerName"] for b in brokers}
        await wait_for(b0_takes_revive_records)
        await cluster.wait_for(lambda: slave.replicas.confirm_offset == master.log.max_offset
                               and "orders" in slave.topics.table)
        await cluster.kill("a0")
        await cluster.wait_for(lambda: slave.acting, timeout=30)
        held = slave.log.max_offset

        popped = await client.rpc.invoke(a1, POP_MESSAGE, pop_fields(invisible=3000))
        assert popped.code == SUCCESS, popped.remark
        got = decode_messages(popped.body)
        assert [m.body for m in got] == [b"m0", b"m1", b"m2"]
        fields = popped.ext_fields
        # The pop's checkpoint is in b0's revive topic, naming broker-a's queue.
        await cluster.wait_for(lambda: any(
            r.topic == REVIVE_TOPIC and r.properties.get("TAGS") == "ck"
            and b'"bn":"broker-a"' in r.body for r in other.log.iter_records()))

        # m0 acked, m2's invisible time changed (a new checkpoint of it, its old one
        # acked), both through a1; nothing more to pop from a1 meanwhile.
        acked = await client.rpc.invoke(a1, ACK_MESSAGE, ack_fields(0, handle(fields, 0)))
        assert acked.code == SUCCESS, acked.remark
        changed = await client.rpc.invoke(a1, CHANGE_MESSAGE_INVISIBLETIME, ack_fields(
            2, handle(fields, 2), invisibleTime="60000"))
        assert changed.code == SUCCESS, changed.remark
        again = await client.rpc.invoke(a1, POP_MESSAGE, pop_fields(invisible=3000))
        assert again.code == POLLING_TIMEOUT, again.remark

        # b0 revives m1 alone, read from a1, into the group's pop retry topic.
        def retried() -> list[bytes]:
            return [r.body for r in other.log.iter_records() if r.topic == RETRY_TOPIC]
        await cluster.wait_for(lambda: retried(), timeout=60)
        ck_offsets = [r.queue_offset for r in other.log.iter_records()
                      if r.topic == REVIVE_TOPIC and r.properties.get("TAGS") == "ck"
                      and r.queue_id == int(fields["reviveQid"])]
        # Done with the first checkpoint: its queue's revive offset is past it.
        await cluster.wait_for(lambda: (other.offsets.table.query(
            REVIVE_GROUP, REVIVE_TOPIC, int(fields["reviveQid"])) or -1) >= ck_offsets[0],
            timeout=60)
        assert retried() == [b"m1"]
        revived = await client.rpc.invoke(b0, POP_MESSAGE, pop_fields(invisible=60_000))
        assert revived.code == SUCCESS, revived.remark
        assert [m.body for m in decode_messages(revived.body)] == [b"m1"]
        # The acting slave served all of it without writing its log.
        assert slave.log.max_offset == held


async def test_a_slave_not_acting_refuses_pops(tmp_path, autojump):
    async with open_static_groups(tmp_path, ("a0", "a1"), transport="inproc",
                                  acting_escape_bridges=["container"]) as (cluster, _):
        client = await cluster.start("client")
        await create_topic(client, cluster.node("a0").address, "orders")
        slave = cluster.broker("a1")
        await cluster.wait_for(lambda: "orders" in slave.topics.table)
        refused = await client.rpc.invoke(cluster.node("a1").address, POP_MESSAGE,
                                          pop_fields(invisible=3000))
        assert refused.code == SERVICE_NOT_AVAILABLE
        assert "is not master" in (refused.remark or "")
