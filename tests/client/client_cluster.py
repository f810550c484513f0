"""Name servers and static broker groups (a master each) for the client tests, inproc or TCP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from triomq.config import NodeConfig
from triomq.runtime import Node
from triomq.settings import from_mapping
from triomq.testing.cluster import Cluster, free_tcp_port, open_cluster

CREATE_TOPIC = 17


class Groups:
    """Broker groups ``broker-a``, ``broker-b``... each one master, registering with ``n1``."""

    def __init__(self, cluster: Cluster, broker: dict[str, Any] | None = None) -> None:
        self.cluster = cluster
        self.groups: dict[str, str] = {}  # node name -> broker group
        #: More ``[broker]`` settings for every broker.
        self.broker = broker or {}

    @property
    def namesrv(self) -> list[str]:
        return list(self.cluster.namesrv_addresses.values())

    def _base(self, name: str, role: str, listen: str) -> dict[str, Any]:
        data: dict[str, Any] = {"name": name, "role": role, "listen": listen,
                                "log_level": "WARNING"}
        if self.cluster.transport == "inproc":
            data["transport"] = {"options": {"inproc": {"network": self.cluster.network,
                                                        "local": f"inproc://{name}"}}}
        return data

    async def start_broker(self, name: str, group: str) -> Node:
        listen = (f"inproc://{name}" if self.cluster.transport == "inproc"
                  else f"tcp://127.0.0.1:{free_tcp_port()}")
        data = self._base(name, "broker", listen)
        data["store"] = {"path": str(self.cluster.root / name)}
        data["broker"] = {"broker_name": group, "broker_id": 0, "master_epoch": 1,
                          "ha_listen_port": 0, "flush_policy": "none",
                          "namesrv_addr": self.namesrv, **self.broker}
        self.groups[name] = group
        return await self.cluster.start(name, from_mapping(NodeConfig, data))

    async def client(self, name: str = "app") -> Node:
        data = self._base(name, "standalone", "")
        return await self.cluster.start(name, from_mapping(NodeConfig, data))

    async def create_topic(self, topic: str, queues: int = 4) -> None:
        """Create ``topic`` on every running broker and wait until the name servers route it."""
        admin = self.cluster.node("admin") if "admin" in self.cluster.running \
            else await self.client("admin")
        fields = {"topic": topic, "readQueueNums": str(queues), "writeQueueNums": str(queues),
                  "perm": "6"}
        running = [n for n in self.groups if n in self.cluster.running]
        for name in running:
            answer = await admin.rpc.invoke(self.cluster.node(name).address, CREATE_TOPIC, fields)
            assert answer.code == 0, answer.remark
        await self.wait_routed(topic, {self.groups[n] for n in running})

    async def wait_routed(self, topic: str, groups: set[str]) -> None:
        """Until every name server routes ``topic`` to exactly ``groups``, each with a master."""
        import json

        admin = self.cluster.node("admin")
        with trio.fail_after(20):
            for address in self.namesrv:
                while True:
                    answer = await admin.rpc.invoke(address, 105, {"topic": topic})
                    if answer.code == 0:
                        route = json.loads(answer.body)
                        names = {b["brokerName"] for b in route["brokerDatas"]
                                 if "0" in b["brokerAddrs"]}
                        if names == groups:
                            break
                    await trio.sleep(0.01)


@asynccontextmanager
async def open_groups(root: Path, transport: str = "inproc", *, groups: int = 1,
                      namesrvs: int = 1, broker: dict[str, Any] | None = None
                      ) -> AsyncIterator[Groups]:
    """Name servers and ``groups`` broker groups (nodes ``a``, ``b``...), all started
    (``broker``: more ``[broker]`` settings)."""
    async with open_cluster(root, transport=transport, controllers=0, brokers=0,
                            namesrvs=namesrvs) as cluster:
        await cluster.start_namesrvs()
        harness = Groups(cluster, broker)
        for n in range(groups):
            letter = "abcdefgh"[n]
            await harness.start_broker(letter, f"broker-{letter}")
        yield harness


async def start_replicated_topic(cluster: Cluster, topic: str, *, app: str = "client",
                                 queues: int = 2) -> tuple[Node, str]:
    """A controller-mode group started on ``cluster`` with ``topic`` on every replica;
    the client node ``app`` and the group's master."""
    await cluster.start_namesrvs()
    await cluster.start_controllers()
    await cluster.start_brokers()
    node = await cluster.start(app)
    master = await cluster.wait_master()
    fields = {"topic": topic, "readQueueNums": str(queues), "writeQueueNums": str(queues),
              "perm": "6"}
    assert (await node.rpc.invoke(cluster.node(master).address, CREATE_TOPIC, fields)).code == 0
    await cluster.wait_for(lambda: all(  # the slaves have copied the topic
        topic in b.topics.table for b in cluster.brokers().values()))
    return node, master
