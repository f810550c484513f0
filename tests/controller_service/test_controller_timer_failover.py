"""Timer messages across a controller-mode failover: the new master rebuilds its wheel
from the timer checkpoint its slaves copied, and no acknowledged timer message is lost."""

from __future__ import annotations

import trio
from controller_service_helpers import wait_full_sync_state_set

from triomq.broker.service import Broker
from triomq.testing.direct_send import DirectProducer

BROKER = {"timer_precision_ms": 100, "slave_synchronize_period": 50}


def delivered(broker: Broker) -> list[bytes]:
    return [r.body for r in broker.log.iter_records() if r.topic == "orders"]


async def test_no_due_timer_message_is_lost_across_a_failover(make_cluster):
    async with make_cluster(broker=BROKER) as cluster:
        await cluster.start_controllers()
        await cluster.start_brokers()
        client = await cluster.start("client")
        master = await cluster.wait_master()
        await wait_full_sync_state_set(cluster, master)
        old = cluster.broker(master)
        producer = DirectProducer(client.rpc, old.node.address)
        soon = [b"soon-%d" % n for n in range(5)]
        later = [b"later-%d" % n for n in range(5)]
        for body in soon:
            await producer.send("orders", body, properties={"TIMER_DELAY_MS": "300"})
        # Delivered on the old master, and its slaves copied where its wheel is.
        await cluster.wait_for(lambda: sorted(delivered(old)) == soon)
        slaves = [b for n, b in cluster.brokers().items() if n != master]
        await cluster.wait_for(lambda: all(
            s.timer is not None and s.timer.table.checkpoint.queue_offset == 5
            for s in slaves))
        for body in later:
            await producer.send("orders", body, properties={"TIMER_DELAY_SEC": "3"})

        await cluster.kill(master)
        new = cluster.broker(await cluster.wait_master(epoch_above=1))
        # Every one is delivered by the new master: none lost, the early ones not again.
        with trio.fail_after(30):
            while sorted(set(delivered(new))) != sorted(soon + later):
                await trio.sleep(0.02)
        assert sorted(delivered(new)[:5]) == soon
        assert all(delivered(new).count(body) == 1 for body in soon)
        waited = {r.properties["UNIQ_KEY"]: r for r in new.log.iter_records()
                  if r.topic == "rmq_sys_wheel_timer"}
        for record in new.log.iter_records():
            if record.topic == "orders" and record.body in later:
                # Its slot had passed when it was stored.
                assert record.store_timestamp >= int(record.properties["TIMER_OUT_MS"]) + 100
                assert record.properties["UNIQ_KEY"] in waited
