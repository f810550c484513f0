"""A slave acting for its absent master delivers the delayed and timer messages that come
due meanwhile, through an escape bridge onto another group's master, never into its own
log: through the ``container`` bridge (a master in the same process) and through the
``remote`` one (over TCP). Real time, with waits that are liveness bounds only."""

from __future__ import annotations

import pytest
from acting_nodes import create_topic, open_static_groups, route, wait_for

SEND_MESSAGE_V2 = 310
#: A delayed message of level 2 waits 2 s: the master is gone before it is due.
LEVELS = "100ms 2s"


def send_fields(properties: str, n: int) -> dict[str, str]:
    """SEND_MESSAGE_V2's header as RocketMQ's clients build it, to orders queue 0."""
    return {"a": "pg", "b": "orders", "c": "TBW102", "d": "4", "e": "0", "f": "0",
            "g": "1700000000000", "h": "0",
            "i": f"UNIQ_KEY\x01AC1E00000000000000000000000{n}\x02{properties}", "j": "0",
            "k": "false", "m": "false"}


def records(broker, topic: str) -> list:
    return [record for record in broker.log.iter_records() if record.topic == topic]


@pytest.mark.parametrize(("transport", "bridges"), [
    ("inproc", ["container"]), ("tcp", ["container"]), ("tcp", ["remote"])])
async def test_due_messages_are_escaped_while_the_master_is_gone(tmp_path, transport, bridges):
    async with open_static_groups(tmp_path, ("a0", "a1", "b0"), transport=transport,
                                  message_delay_level=LEVELS, acting_escape_bridges=bridges,
                                  enable_remote_escape="remote" in bridges) as (cluster, _):
        (namesrv,) = cluster.namesrv_addresses.values()
        client = await cluster.start("client")
        for name in ("a0", "b0"):
            await create_topic(client, cluster.node(name).address, "orders")

        async def routed() -> bool:
            return len((await route(client, namesrv, "orders"))["brokerDatas"]) == 2
        await wait_for(routed)

        master, slave, other = cluster.broker("a0"), cluster.broker("a1"), cluster.broker("b0")
        for n, properties in enumerate(["DELAY\x012\x02", "TIMER_DELAY_MS\x012000\x02"]):
            answer = await client.rpc.invoke(cluster.node("a0").address, SEND_MESSAGE_V2,
                                             send_fields(properties, n), b"due-%d" % n)
            assert answer.code == 0, answer.remark
        # The slave serves what its master confirmed: the next frame after the bytes says so.
        await cluster.wait_for(lambda: slave.replicas.confirm_offset == master.log.max_offset)
        assert records(master, "orders") == []  # none is due yet
        await cluster.kill("a0")
        held = slave.log.max_offset

        await cluster.wait_for(lambda: slave.acting, timeout=20)
        await cluster.wait_for(lambda: len(records(other, "orders")) == 2, timeout=20)
        delivered = records(other, "orders")
        assert sorted(r.body for r in delivered) == [b"due-0", b"due-1"]
        for record in delivered:
            assert "DELAY" not in record.properties and record.queue_id == 0
        # The acting slave wrote nothing of its own.
        assert slave.log.max_offset == held


@pytest.mark.parametrize(("transport", "bridges"), [("inproc", ["container"]),
                                                    ("tcp", ["remote"])])
async def test_messages_not_due_are_handed_on_for_their_time(tmp_path, transport, bridges):
    """A delayed and a timer message a minute from due go to the other master at once, as
    timer messages for when they are due; the acting slave's delay offset and timer
    checkpoint move past them (a returning master takes those back: it does not deliver
    them again)."""
    async with open_static_groups(tmp_path, ("a0", "a1", "b0"), transport=transport,
                                  message_delay_level="100ms 2s 1m", acting_escape_bridges=bridges,
                                  enable_remote_escape="remote" in bridges) as (cluster, _):
        (namesrv,) = cluster.namesrv_addresses.values()
        client = await cluster.start("client")
        for name in ("a0", "b0"):
            await create_topic(client, cluster.node(name).address, "orders")

        async def routed() -> bool:
            return len((await route(client, namesrv, "orders"))["brokerDatas"]) == 2
        await wait_for(routed)
        master, slave, other = cluster.broker("a0"), cluster.broker("a1"), cluster.broker("b0")
        for n, properties in enumerate(["DELAY\x013\x02", "TIMER_DELAY_MS\x0160000\x02"]):
            answer = await client.rpc.invoke(cluster.node("a0").address, SEND_MESSAGE_V2,
                                             send_fields(properties, n), b"later-%d" % n)
            assert answer.code == 0, answer.remark
        (delayed,) = records(master, "SCHEDULE_TOPIC_XXXX")
        (timer,) = records(master, "rmq_sys_wheel_timer")
        slot_end = int(timer.properties["TIMER_OUT_MS"]) + slave.config.timer_precision_ms
        due = {b"later-0": str(delayed.store_timestamp + 60_000), b"later-1": str(slot_end)}
        await cluster.wait_for(lambda: slave.replicas.confirm_offset == master.log.max_offset)
        await cluster.kill("a0")
        held = slave.log.max_offset

        await cluster.wait_for(lambda: slave.acting, timeout=20)
        await cluster.wait_for(lambda: len(records(other, "rmq_sys_wheel_timer")) == 2,
                               timeout=20)
        handed = records(other, "rmq_sys_wheel_timer")
        assert {r.body: r.properties["TIMER_DELIVER_MS"] for r in handed} == due
        assert all(r.properties["REAL_TOPIC"] == "orders" and "DELAY" not in r.properties
                   for r in handed)
        assert records(other, "orders") == []  # not before their time
        await cluster.wait_for(lambda: slave.schedule.table.offset(3) == 1
                               and slave.timer.table.checkpoint.queue_offset == 1)
        assert slave.log.max_offset == held
