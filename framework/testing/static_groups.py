"""Static broker groups with slave acting master, beside a ``Cluster``'s name servers.

For tests and the acting-master demo: node ``<letter><id>`` is broker id
``id`` of group ``broker-<letter>``, a slave of ``<letter>0`` unless it is
id 0; every one with ``enable_slave_acting_master``, and timings short
enough that a slave acts within a second or two of its master's end::

    async with open_static_groups(tmp_path, ("a0", "a1", "b0"),
                                  message_delay_level="100ms 2s") as (cluster, groups):
        ...

A node started again (``start`` after ``Cluster.kill``) keeps its addresses
and its store.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from triomq.config import NodeConfig
from triomq.runtime import Node
from triomq.settings import from_mapping
from triomq.testing.cluster import Cluster, free_tcp_port, open_cluster

__all__ = ["ACTING_NAMESRV", "Groups", "acting_namesrv", "open_static_groups"]

#: ``[namesrv]`` keys of name servers that route acting masters, scanning every 100 ms.
ACTING_NAMESRV = {"support_acting_master": True, "scan_not_active_broker_interval": 100}


def acting_namesrv(cluster: Cluster) -> None:
    """The cluster's name servers (started after this) support acting masters."""
    cluster.namesrv_options.update(ACTING_NAMESRV)


class Groups:
    """Static groups of ``cluster``: each node's config, addresses and start.

    ``broker`` holds extra ``[broker]`` keys of every node."""

    def __init__(self, cluster: Cluster, **broker: Any) -> None:
        self.cluster = cluster
        self.broker = broker
        self.listen: dict[str, str] = {}
        self.ha_port: dict[str, int] = {}

    def _addresses(self, name: str) -> None:
        if name not in self.listen:
            tcp = self.cluster.transport == "tcp"
            self.listen[name] = (f"tcp://127.0.0.1:{free_tcp_port()}" if tcp
                                 else f"inproc://{name}")
            self.ha_port[name] = free_tcp_port() if tcp else 0

    def ha_address(self, name: str) -> str:
        """Where node ``name``'s slaves replicate from."""
        self._addresses(name)
        if self.cluster.transport == "inproc":
            return f"{self.listen[name]}-ha"
        return f"tcp://127.0.0.1:{self.ha_port[name]}"

    def config(self, name: str, **extra: Any) -> NodeConfig:
        """Node ``name``'s config, with ``extra`` ``[broker]`` keys."""
        self._addresses(name)
        data = self.cluster._base(name, "broker", self.listen[name])
        broker_id = int(name[1:])
        data["broker"] = {
            "broker_name": self.group(name), "broker_id": broker_id, "master_epoch": 1,
            "ha_listen_port": self.ha_port[name],
            "ha_master_address": "" if broker_id == 0 else self.ha_address(f"{name[0]}0"),
            "flush_policy": "none",
            "namesrv_addr": list(self.cluster.namesrv_addresses.values()),
            "enable_slave_acting_master": True, "sync_broker_member_group_period": 100,
            "broker_not_active_timeout": 1000, "broker_heartbeat_interval": 100,
            **self.broker, **extra,
        }
        return from_mapping(NodeConfig, data)

    async def start(self, name: str, **extra: Any) -> Node:
        """Start node ``name`` (again, after a kill: same addresses, same store)."""
        return await self.cluster.start(name, self.config(name, **extra))

    @staticmethod
    def group(name: str) -> str:
        """The broker group node ``name`` belongs to."""
        return f"broker-{name[0]}"

    def location(self, name: str) -> str:
        """The address as routes carry it."""
        self._addresses(name)
        return self.listen[name].removeprefix("tcp://")


@asynccontextmanager
async def open_static_groups(root: Path, names: Sequence[str], *, transport: str = "inproc",
                             **broker: Any) -> AsyncIterator[tuple[Cluster, Groups]]:
    """A cluster of one name server that routes acting masters (and no controllers),
    started, with the static groups' nodes ``names`` started in order; ``broker``: more
    ``[broker]`` keys of each."""
    async with open_cluster(root, transport=transport, controllers=0, brokers=0,
                            namesrvs=1) as cluster:
        acting_namesrv(cluster)
        await cluster.start_namesrvs()
        groups = Groups(cluster, **broker)
        for name in names:
            await groups.start(name)
        yield cluster, groups
