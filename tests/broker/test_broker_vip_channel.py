"""``broker.vip_channel``: the broker also serves on its TCP port minus 2, where
RocketMQ's slaves dial their master (``MixAll.brokerVIPChannel``) to copy its
topics, offsets and checkpoints; over real TCP."""

from __future__ import annotations

import socket
import tomllib
from pathlib import Path

import pytest
from broker_nodes import Cluster

from triomq.config import NodeConfig, from_mapping
from triomq.errors import ConfigError
from triomq.protocol.request_codes import RequestCode
from triomq.protocol.route import loads
from triomq.runtime import open_node
from triomq.testing.cluster import free_tcp_port


def port_with_vip_channel_free() -> int:
    for _ in range(1_000):
        port = free_tcp_port()
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port - 2))
            except OSError:
                continue
        return port
    raise OSError("no free port whose port - 2 is free too")


def config(cluster: Cluster, listen: str) -> NodeConfig:
    text = cluster.toml("b0", extra="vip_channel = true").replace(
        'listen = "tcp://127.0.0.1:0"', f'listen = "{listen}"')
    return from_mapping(NodeConfig, tomllib.loads(text))


async def test_the_vip_channel_serves_what_the_listen_port_serves(tmp_path: Path) -> None:
    cluster = Cluster("tcp", tmp_path)
    port = port_with_vip_channel_free()
    async with open_node(config(cluster, f"tcp://127.0.0.1:{port}"), plugins=cluster.pm) as node:
        # What RocketMQ's slave asks first: its master's topics.
        answers = [await node.rpc.invoke(f"tcp://127.0.0.1:{p}",
                                         RequestCode.GET_ALL_TOPIC_CONFIG, {})
                   for p in (port, port - 2)]
    assert [a.code for a in answers] == [0, 0]
    assert loads(answers[0].body)["topicConfigTable"].keys() \
        == loads(answers[1].body)["topicConfigTable"].keys()


async def test_the_vip_channel_needs_a_fixed_tcp_port(tmp_path: Path) -> None:
    cluster = Cluster("tcp", tmp_path)
    with pytest.raises(ConfigError, match="needs a fixed TCP listen port"):
        async with open_node(config(cluster, "tcp://127.0.0.1:0"), plugins=cluster.pm):
            pass
