"""Real processes: a consumer group keeps consuming through its master's SIGKILL.

Three broker replicas run as ``python -m triomq.cli broker`` processes in
controller mode with ``all_ack_in_sync_state_set = true``; the controllers
and a name server run in the test's process, over TCP. A ``Producer`` sends
without pause and a ``PushConsumer`` group reads the topic from its first
offset while the master's process is killed with SIGKILL: every message
acknowledged before or after the kill is consumed, and what is consumed
twice stays within what was delivered but not yet committed when the
master died.
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import trio

from triomq.client.core.consume_from import ConsumeFromWhere
from triomq.client.core.errors import ClientError
from triomq.client.core.listener import ConsumeConcurrentlyStatus, MessageListenerConcurrently
from triomq.client.core.message import Message, MessageExt, SendStatus
from triomq.client.producer import Producer
from triomq.client.push_consumer import PushConsumer
from triomq.controller.client import ControllerClient, ReplicaInfo
from triomq.rpc import RpcError
from triomq.testing.cluster import open_cluster

sys.path.insert(0, str(Path(__file__).resolve().parent))
from broker_processes import Replica, wait_group

TOPIC = "Orders"
GROUP = "OrderReaders"
QUEUES = 4
QUERY_CONSUMER_OFFSET = 14
CREATE_TOPIC = 17


class Deliveries:
    """What the group's listener was handed: each (queue, offset) and message id, how often."""

    def __init__(self) -> None:
        self.by_position: collections.Counter[tuple[int, int]] = collections.Counter()
        self.by_id: collections.Counter[str] = collections.Counter()

    async def handle(self, messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        for message in messages:
            self.by_position[message.queue_id, message.queue_offset] += 1
            self.by_id[message.msg_id] += 1
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def next_offsets(self) -> dict[int, int]:
        """Per queue, one past the highest offset delivered."""
        ends: dict[int, int] = {}
        for queue, offset in self.by_position:
            ends[queue] = max(ends.get(queue, 0), offset + 1)
        return ends


async def test_a_consumer_group_keeps_consuming_through_a_master_sigkill(tmp_path: Path) -> None:
    async with open_cluster(tmp_path, transport="tcp", brokers=0, namesrvs=1) as cluster:
        await cluster.start_namesrvs()
        await cluster.start_controllers()
        client = await cluster.start("client")
        controller_addresses = list(cluster.controller_addresses.values())
        namesrv = cluster.namesrv_addresses["n1"].removeprefix("tcp://")
        replicas = {r.address: r for r in (Replica(f"b{i}", tmp_path, controller_addresses,
                                                   namesrv) for i in (1, 2, 3))}
        controllers = ControllerClient(client.rpc, controller_addresses)

        async def group(min_epoch: int = 0) -> ReplicaInfo:
            return await wait_group(controllers, replicas, epoch_above=min_epoch,
                                    in_sync=3 - (min_epoch > 0))

        try:
            for replica in replicas.values():
                await replica.start()
            info = await group()
            answer = await client.rpc.invoke(info.master_address, CREATE_TOPIC, {
                "topic": TOPIC, "readQueueNums": str(QUEUES), "writeQueueNums": str(QUEUES),
                "perm": "6"})
            assert answer.code == 0, answer.remark

            acked: set[str] = set()
            deliveries = Deliveries()
            producer = Producer("OrderWriters", [namesrv], send_msg_timeout=2.0)
            consumer = PushConsumer(GROUP, [namesrv], rebalance_interval=1.0,
                                    persist_consumer_offset_interval=0.5,
                                    pull_delay_on_exception=0.1,
                                    consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
            consumer.subscribe(TOPIC, "*")
            consumer.register_message_listener(MessageListenerConcurrently(deliveries.handle))
            producing = True
            produced = trio.Event()

            async def produce() -> None:
                n = 0
                while producing:
                    n += 1
                    try:
                        result = await producer.send(Message(TOPIC, b"order-%d" % n))
                    except (ClientError, RpcError):
                        await trio.sleep(0.01)
                        continue
                    if result.send_status is SendStatus.SEND_OK:
                        acked.add(result.msg_id)
                produced.set()

            async def until(predicate, timeout: float = 60) -> None:
                with trio.fail_after(timeout):
                    while not predicate():
                        await trio.sleep(0.01)

            async with (producer.start(client.connect), consumer.start(client.connect),
                        trio.open_nursery() as nursery):
                nursery.start_soon(produce)
                await until(lambda: len(acked) >= 150 and len(deliveries.by_id) >= 100)

                # What the group had been handed and what its master had stored of its
                # offsets, when the master died: a consumer resuming anywhere rewinds to
                # no earlier than the committed offsets.
                delivered = deliveries.next_offsets()
                committed = {}
                for queue in range(QUEUES):
                    answer = await client.rpc.invoke(info.master_address, QUERY_CONSUMER_OFFSET, {
                        "consumerGroup": GROUP, "topic": TOPIC, "queueId": str(queue)})
                    committed[queue] = int(answer.ext_fields["offset"]) if answer.code == 0 else 0
                await replicas[info.master_address].kill()
                new = await group(min_epoch=info.master_epoch)
                assert new.master_address != info.master_address

                before = len(acked)
                await until(lambda: len(acked) >= before + 150)
                producing = False
                await produced.wait()  # the last send's answer is in
                await until(lambda: acked <= deliveries.by_id.keys())

            assert acked <= deliveries.by_id.keys()  # nothing acknowledged is lost
            redelivered = sum(n - 1 for n in deliveries.by_position.values())
            uncommitted = sum(max(0, delivered.get(q, 0) - committed[q]) for q in range(QUEUES))
            assert redelivered <= uncommitted
        finally:
            for replica in replicas.values():
                await replica.stop()
