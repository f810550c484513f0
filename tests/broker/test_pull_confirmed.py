"""Consumers read only what the replicas confirm: a record a failover could still cut
is neither pulled nor counted in a queue's max offset until the SyncStateSet holds it."""

from __future__ import annotations

import pytest
import trio
from broker_nodes import Cluster, wait_until
from test_pull import CREATE, SUBSCRIPTION, SUSPEND, pull, records

from triomq.broker.consume.core.pull import confirmed_max_offset
from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.testing.direct_send import DirectProducer, FlushSlaveTimeout

# The slave stays in the SyncStateSet however long it is cut off (the master would
# otherwise shrink it out, and confirm alone what it holds). A put waits 1.5 s for the
# slave's ack (under the client's 3 s): enough for one not cut off, on a busy machine too.
SYNC = """all_ack_in_sync_state_set = true
sync_flush_timeout = 1500
ha_max_time_slave_not_catchup = 3600000"""


@pytest.mark.parametrize(("ends", "confirm", "expected"), [
    ([], 0, 0),                       # an empty queue
    ([10, 20, 30], 30, 3),            # all confirmed
    ([10, 20, 30], 29, 2),            # the last record ends past it
    ([10, 20, 30], 19, 1),
    ([10, 20, 30], 9, 0),             # none confirmed
    ([10, 20, 30], -1, 0),            # a replica that has heard no confirm offset yet
    ([10, 20, 30, 40, 50, 60, 70], 45, 4),
])
def test_the_confirmed_end_is_past_the_last_record_the_confirm_offset_covers(
        ends: list[int], confirm: int, expected: int) -> None:
    asked: list[int] = []

    def entry_end(queue_offset: int) -> int:
        asked.append(queue_offset)
        return ends[queue_offset]

    assert confirmed_max_offset(0, len(ends), confirm, entry_end) == expected
    assert len(asked) <= 1 + max(1, len(ends)).bit_length()  # a binary search


def test_the_confirmed_end_counts_from_the_queue_start() -> None:
    ends = {5: 100, 6: 200, 7: 300}
    assert confirmed_max_offset(5, 8, 250, ends.__getitem__) == 7
    assert confirmed_max_offset(5, 8, 50, ends.__getitem__) == 5


async def test_a_record_the_slave_lacks_is_not_pulled_until_it_holds_it(tmp_path) -> None:
    cluster = Cluster("inproc", tmp_path)
    async with (
        cluster.client() as client,
        cluster.broker("a", extra=SYNC) as a,
        cluster.broker("b", broker_id=1, master=a.ha_address, extra=SYNC) as b,
    ):
        call, address = client.rpc.invoke, a.node.address
        await call(address, RequestCode.UPDATE_AND_CREATE_TOPIC, CREATE)
        await wait_until(lambda: len(a.replicas.sync_state_set) == 2)
        producer = DirectProducer(client.rpc, address)
        await producer.send("orders", b"held by both", queue_id=0)

        network = a.node.transport("inproc").network
        network.partition("inproc://b", a.ha_address)
        with pytest.raises(FlushSlaveTimeout):
            await producer.send("orders", b"master only", queue_id=0)
        assert b.log.max_offset < a.log.max_offset
        # Stored on the master, but a failover to b would cut it: consumers do not see it.
        answer = await call(address, RequestCode.GET_MAX_OFFSET,
                            {"topic": "orders", "queueId": "0"})
        assert answer.ext_fields["offset"] == "1"
        answer = await call(address, RequestCode.PULL_MESSAGE, pull(0))
        assert [r.body for r in records(answer.body)] == [b"held by both"]
        assert answer.ext_fields["maxOffset"] == "1"

        # A long poll for it is answered once the slave has it and acks.
        answers = []

        async def long_poll() -> None:
            answers.append(await call(address, RequestCode.PULL_MESSAGE,
                                      pull(1, flags=SUBSCRIPTION | SUSPEND), timeout=60))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(long_poll)
            await wait_until(lambda: len(a.pulls.holds) == 1)
            network.heal()
        assert answers[0].code == ResponseCode.SUCCESS
        assert [r.body for r in records(answers[0].body)] == [b"master only"]
