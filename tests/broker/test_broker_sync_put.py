"""Synchronous puts under network faults (inproc fault injection), and slaves refusing puts."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from broker_nodes import Cluster, caught_up, image, wait_until

from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.testing.direct_send import (
    DirectProducer,
    FlushSlaveTimeout,
    SendError,
    ServiceNotAvailable,
)

# A slave is never shrunk out during these tests: only the timeout decides.
SYNC = """all_ack_in_sync_state_set = true
sync_flush_timeout = 300
ha_max_time_slave_not_catchup = 600000
"""


@pytest.fixture
def inproc(tmp_path) -> Cluster:
    return Cluster("inproc", tmp_path)


async def test_put_waits_for_the_slave_ack_and_times_out_when_partitioned(inproc):
    async with (
        inproc.client() as client,
        inproc.broker("a", extra=SYNC) as a,
        inproc.broker("b", broker_id=1, master=a.ha_address, extra=SYNC) as b,
    ):
        producer = DirectProducer(client.rpc, a.node.address)
        await wait_until(lambda: a.replicas.sync_state_set == {a.broker_id, b.broker_id})
        first = await producer.send("t", b"replicated")
        assert b.log.max_offset > first.physical_offset

        network = a.node.transport("inproc").network
        network.partition("inproc://b", a.ha_address)
        with pytest.raises(FlushSlaveTimeout) as info:
            await producer.send("t", b"held back")
        assert info.value.code == ResponseCode.FLUSH_SLAVE_TIMEOUT
        stored = info.value.result
        assert stored is not None
        assert a.log.read_record(stored.physical_offset).body == b"held back"
        assert b.log.max_offset <= stored.physical_offset

        network.heal()
        await caught_up(a, b)
        assert image(a) == image(b)


async def test_put_in_flight_completes_only_once_the_partition_heals(inproc):
    patient = SYNC.replace("sync_flush_timeout = 300", "sync_flush_timeout = 60000")
    async with (
        inproc.client() as client,
        inproc.broker("a", extra=patient) as a,
        inproc.broker("b", broker_id=1, master=a.ha_address, extra=patient) as b,
    ):
        await wait_until(lambda: len(a.replicas.sync_state_set) == 2)
        network = a.node.transport("inproc").network
        network.partition("inproc://b", a.ha_address)
        results = []

        async def send() -> None:
            results.append(await DirectProducer(client.rpc, a.node.address).send("t", b"later"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            await wait_until(lambda: a.log.max_offset > 0)
            # Stored on the master, not on the slave: the put is still waiting.
            await trio.testing.wait_all_tasks_blocked()
            assert not results
            assert b.log.max_offset == 0
            network.heal()
        assert results[0].physical_offset == 0
        assert b.log.max_offset == a.log.max_offset


async def test_slave_refuses_puts_and_answers_offsets(inproc):
    async with (
        inproc.client() as client,
        inproc.broker("a") as a,
        inproc.broker("b", broker_id=1, master=a.ha_address) as b,
    ):
        await DirectProducer(client.rpc, a.node.address).send("t", b"x", queue_id=1)
        with pytest.raises(ServiceNotAvailable) as info:
            await DirectProducer(client.rpc, b.node.address).send("t", b"y")
        assert "not master" in str(info.value)
        await caught_up(a, b)
        for broker in (a, b):
            response = await client.rpc.invoke(broker.node.address, RequestCode.GET_MAX_OFFSET)
            assert int(response.ext_fields["offset"]) == a.log.max_offset

            # A queue's max is what its consumers may read: up to the confirm offset,
            # which a slave learns from the master's next frame (a heartbeat at most).
            with trio.fail_after(5):
                while (await client.rpc.invoke(
                        broker.node.address, RequestCode.GET_MAX_OFFSET,
                        {"topic": "t", "queueId": "1"})).ext_fields["offset"] != "1":
                    await trio.sleep(0.01)
            response = await client.rpc.invoke(broker.node.address, RequestCode.GET_MIN_OFFSET)
            assert response.ext_fields["offset"] == "0"


async def test_bad_send_headers_are_answered_message_illegal(inproc):
    async with inproc.client() as client, inproc.broker("a") as a:
        response = await client.rpc.invoke(a.node.address, RequestCode.SEND_MESSAGE_V2,
                                           {"b": "t", "e": "minus one"}, b"x")
        assert response.code == ResponseCode.MESSAGE_ILLEGAL
        assert "queueId" in response.remark
        with pytest.raises(SendError):
            await DirectProducer(client.rpc, a.node.address).send("t" * 40000, b"x")
        assert a.log.max_offset == 0


async def test_in_sync_replicas_not_enough(inproc):
    async with inproc.client() as client, inproc.broker("a", extra="min_in_sync_replicas = 2") as a:
        with pytest.raises(SendError) as info:
            await DirectProducer(client.rpc, a.node.address).send("t", b"x")
        assert info.value.code == ResponseCode.SYSTEM_ERROR
        assert "in-sync replicas not enough" in str(info.value)
        # Refused before it was stored: a retry cannot store it twice.
        assert info.value.result is None
        assert a.log.max_offset == 0


async def test_a_role_change_fails_the_puts_in_flight(inproc):
    patient = SYNC.replace("sync_flush_timeout = 300", "sync_flush_timeout = 60000")
    async with (
        inproc.client() as client,
        inproc.broker("a", extra=patient) as a,
        inproc.broker("b", broker_id=1, master=a.ha_address, extra=patient) as b,
    ):
        await wait_until(lambda: len(a.replicas.sync_state_set) == 2)
        # b holds a byte of epoch 1: with none, b and a would share no epoch.
        await DirectProducer(client.rpc, a.node.address).send("t", b"shared")
        a.node.transport("inproc").network.partition("inproc://b", a.ha_address)
        shared = a.log.max_offset
        failures = []

        async def send() -> None:
            with pytest.raises(ServiceNotAvailable) as info:
                await DirectProducer(client.rpc, a.node.address).send("t", b"orphan")
            failures.append(info.value)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            await wait_until(lambda: a.log.max_offset > shared)
            await b.replicas.change_to_master(2, b.broker_id)
            await a.replicas.change_to_slave(b.ha_address, 2, a.broker_id)
        a.node.transport("inproc").network.heal()
        assert "stopped being master" in failures[0].remark
        assert failures[0].result is not None
        await caught_up(b, a)
        assert a.log.max_offset == b.log.max_offset == shared  # the orphan was cut
