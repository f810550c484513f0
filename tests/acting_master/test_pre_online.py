"""A returning master's pre-online: it starts isolated (unregistered), takes back the
newer consumer offsets its acting slave moved on, then registers; the group's offsets
never go back. With skip_pre_online the master registers at once and the slave copies
its older offsets back."""

from __future__ import annotations

import json

import pytest
from acting_nodes import create_topic, open_static_groups

QUERY_CONSUMER_OFFSET, UPDATE_CONSUMER_OFFSET, HEART_BEAT = 14, 15, 34
#: The default version steps (500 commits): an acting term's few commits are newer
#: all the same, by the new DataVersion state the term starts.
BROKER = {"slave_synchronize_period": 100}


def heartbeat(group: str) -> bytes:
    """A consumer's HEART_BEAT, as RocketMQ's clients send it: it creates the group."""
    return json.dumps({"clientID": "c1", "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": "orders", "subString": "*", "tagsSet": [],
                                 "codeSet": [], "subVersion": 0, "expressionType": "TAG",
                                 "classFilterMode": False}]}],
        "producerDataSet": []}).encode()


@pytest.mark.parametrize("skip", [False, True])
async def test_a_returning_master_takes_back_the_newer_offsets_first(tmp_path, skip):
    async with open_static_groups(tmp_path, ("a0", "a1"), skip_pre_online=skip,
                                  **BROKER) as (cluster, group):
        (namesrv,) = cluster.namesrv_addresses.values()
        client = await cluster.start("client")
        await create_topic(client, cluster.node("a0").address, "orders")

        async def commit(node: str, offset: int) -> None:
            address = cluster.node(node).address
            assert (await client.rpc.invoke(address, HEART_BEAT, {}, heartbeat("cg"))).code == 0
            fields = {"consumerGroup": "cg", "topic": "orders", "queueId": "0",
                      "commitOffset": str(offset)}
            answer = await client.rpc.invoke(address, UPDATE_CONSUMER_OFFSET, fields)
            assert answer.code == 0, answer.remark

        def offset(node: str) -> int | None:
            return cluster.broker(node).offsets.table.query("cg", "orders", 0)

        await commit("a0", 1)
        slave = cluster.broker("a1")
        await cluster.wait_for(lambda: offset("a1") == 1)
        await cluster.kill("a0")
        await cluster.wait_for(lambda: slave.acting, timeout=20)
        await commit("a1", 5)  # consumers commit to the acting slave meanwhile

        await group.start("a0")
        master = cluster.broker("a0")
        await cluster.wait_for(lambda: not slave.acting, timeout=30)
        answer = await client.rpc.invoke(namesrv, 105, {"topic": "orders"})
        assert json.loads(answer.body)["brokerDatas"][0]["brokerAddrs"]["0"] == "inproc://a0"
        if skip:
            # Registered at once with its old offset, which the slave copies back.
            assert offset("a0") == 1 and master.pre_online is None
            await cluster.wait_for(lambda: offset("a1") == 1)
        else:
            # Registered only once it held the slave's newer offset: nothing went back.
            assert offset("a0") == 5 and not master.isolated
            # What it took, and from whom, as the broker keeps it for a report.
            assert ("consumer offsets", slave.rpc_address) in master.pre_online.adopted
            assert master.pre_online.outcome.startswith("took back")
            await cluster.wait_for(lambda: slave.offsets.table.data_version
                                   == master.offsets.table.data_version)
            assert offset("a1") == 5
