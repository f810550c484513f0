"""Pop consumption across a controller-mode failover: the new master's revive goes on
from the revive offset its slaves copied (the revive group's consumer offset), so what the
old master revived is not revived again, and what it had not yet is."""

from __future__ import annotations

import trio
from controller_service_helpers import wait_full_sync_state_set

from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.broker.service import Broker
from triomq.protocol.message import MessageRecord, decode
from triomq.testing.direct_send import DirectProducer

BROKER = {"slave_synchronize_period": 50, "revive_queue_num": 1, "revive_interval": 100}
REVIVE_TOPIC, REVIVE_GROUP = "rmq_sys_REVIVE_LOG_DefaultCluster", "CID_RMQ_SYS_REVIVE_GROUP"
RETRY = "%RETRY%cg_orders"


def retried(broker: Broker) -> list[bytes]:
    return [r.body for r in broker.log.iter_records() if r.topic == RETRY]


def revive_offset(broker: Broker) -> int | None:
    assert broker.offsets is not None
    return broker.offsets.table.query(REVIVE_GROUP, REVIVE_TOPIC, 0)


async def pop(client, broker: Broker, invisible: int) -> tuple[dict, list[MessageRecord]]:
    answer = await client.rpc.invoke(broker.node.address, RequestCode.POP_MESSAGE, {
        "consumerGroup": "cg", "topic": "orders", "queueId": "-1", "maxMsgNums": "32",
        "invisibleTime": str(invisible), "pollTime": "0", "bornTime": "0", "initMode": "1"})
    records, pos = [], 0
    while pos < len(answer.body):
        record, size = decode(answer.body, pos)
        records.append(record)
        pos += size
    return answer.ext_fields, records


async def ack(client, broker: Broker, fields: dict, record: MessageRecord) -> None:
    handle = record.properties.get("POP_CK") or " ".join([
        fields["startOffsetInfo"].split(" ")[2], fields["popTime"], fields["invisibleTime"],
        fields["reviveQid"], "0", "broker-a", str(record.queue_id), str(record.queue_offset)])
    parts = handle.split(" ")
    topic = RETRY if parts[4] == "1" else "orders"
    answer = await client.rpc.invoke(broker.node.address, RequestCode.ACK_MESSAGE, {
        "consumerGroup": "cg", "topic": topic, "queueId": parts[6], "offset": parts[7],
        "extraInfo": handle})
    assert answer.code == ResponseCode.SUCCESS, answer.remark


async def test_the_revive_offset_continues_across_a_failover(make_cluster):
    async with make_cluster(broker=BROKER) as cluster:
        await cluster.start_controllers()
        await cluster.start_brokers()
        client = await cluster.start("client")
        master = await cluster.wait_master()
        await wait_full_sync_state_set(cluster, master)
        old = cluster.broker(master)
        producer = DirectProducer(client.rpc, old.node.address)
        for body in (b"m0", b"m1", b"m2"):
            await producer.send("orders", body, queue_id=0)
        # Popped; m0 acked; m1 and m2 revived by the old master, which moves its revive
        # offset past the checkpoint and the ack; its slaves copy it.
        fields, records = await pop(client, old, 300)
        assert [r.body for r in records] == [b"m0", b"m1", b"m2"]
        await ack(client, old, fields, records[0])
        await cluster.wait_for(lambda: sorted(retried(old)) == [b"m1", b"m2"])
        await cluster.wait_for(lambda: revive_offset(old) == 1)
        slaves = [b for n, b in cluster.brokers().items() if n != master]
        await cluster.wait_for(lambda: all(revive_offset(s) == 1 for s in slaves))

        # Popped again from the retry topic, m1 acked, m2 not; the master dies before
        # their invisible time is out.
        got: list[MessageRecord] = []
        with trio.fail_after(30):
            while len(got) < 2:
                fields, records = await pop(client, old, 10_000)
                got += records
                for record in records:
                    if record.body == b"m1":
                        await ack(client, old, fields, record)
        assert sorted(r.body for r in got) == [b"m1", b"m2"]
        await cluster.wait_for(lambda: all(s.log.max_offset == old.log.max_offset
                                           for s in slaves))
        await cluster.kill(master)
        new = cluster.broker(await cluster.wait_master(epoch_above=1))

        # The new master revives m2 once more, and neither m0 nor the first revive's
        # messages again: its revive started from the copied offset.
        with trio.fail_after(60):
            while retried(new).count(b"m2") < 2:
                await trio.sleep(0.05)
        await cluster.wait_for(
            lambda: revive_offset(new) == new.log.queue_max_offset(REVIVE_TOPIC, 0) - 1)
        assert sorted(retried(new)) == [b"m1", b"m2", b"m2"]
