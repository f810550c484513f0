"""Strict queue locks across an acting slave and its master's return (seed 003's lock
quorum): a consumer that locked a queue on the acting slave keeps it when the master
comes back with no locks of its own; without strict mode the master would hand the
same queue to another consumer."""

from __future__ import annotations

import json

import pytest
from acting_nodes import create_topic, open_static_groups

LOCK_BATCH_MQ, UNLOCK_BATCH_MQ = 41, 42


def lock_body(client_id: str) -> bytes:
    return json.dumps({"consumerGroup": "cg", "clientId": client_id, "onlyThisBroker": False,
                       "mqSet": [{"topic": "orders", "brokerName": "broker-a", "queueId": 0}]
                       }).encode()


@pytest.mark.parametrize("strict", [True, False])
async def test_two_consumers_never_hold_a_queue_across_the_masters_return(tmp_path, strict):
    async with open_static_groups(tmp_path, ("a0", "a1", "a2"), lock_in_strict_mode=strict,
                                  total_replicas=3) as (cluster, group):
        client = await cluster.start("client")
        await create_topic(client, cluster.node("a0").address, "orders")

        async def lock(node: str, client_id: str) -> list[int]:
            answer = await client.rpc.invoke(cluster.node(node).address, LOCK_BATCH_MQ, {},
                                             lock_body(client_id))
            assert answer.code == 0, answer.remark
            return [mq["queueId"] for mq in json.loads(answer.body)["lockOKMQSet"]]

        await cluster.kill("a0")
        slave = cluster.broker("a1")
        await cluster.wait_for(lambda: slave.acting, timeout=20)
        # c1 locks queue 0 on the acting slave: a1 and a2 grant it, a majority of three.
        assert await lock("a1", "c1") == [0]
        # The master returns, its locks lost with its process.
        await group.start("a0")
        await cluster.wait_for(lambda: not slave.acting, timeout=20)
        if strict:
            # c2 asks the master: only the master grants it, one of three. Refused.
            assert await lock("a0", "c2") == []
            assert await lock("a0", "c1") == [0]  # c1 renews it on the master too
            # Once c1 unlocks (everywhere), c2 gets it.
            answer = await client.rpc.invoke(cluster.node("a0").address, UNLOCK_BATCH_MQ, {},
                                             lock_body("c1"))
            assert answer.code == 0
            assert await lock("a0", "c2") == [0]
        else:
            # Each broker answers from its own locks: c2 gets the queue c1 still holds.
            assert await lock("a0", "c2") == [0]
