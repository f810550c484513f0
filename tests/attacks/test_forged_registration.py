"""A forged REGISTER_BROKER cannot lock a group's real master out of a name server.

The name server runs as ``python -m triomq.cli nameserver``; the real master
and the forger are clients of their own over TCP. One anonymous registration
naming the group's master with ``dataVersion.stateVersion`` 999, from a
connection that then closes, leaves no trace; one kept open while the master
lives is refused; and while the master is away it holds id 0 only until the
master registers again from its own connection. One only slightly ahead in
the master's name is taken while its connection lasts and goes with it.
"""

from __future__ import annotations

import zlib

import trio
from processes import node_process

from triomq.config import NodeConfig
from triomq.protocol.route import (
    DataVersion,
    RegisterBrokerBody,
    TopicConfig,
    TopicRouteData,
    encode_register_broker_body,
)
from triomq.runtime import open_node

REGISTER_BROKER = 103
GET_ROUTEINFO_BY_TOPIC = 105
SUCCESS, SYSTEM_ERROR = 0, 1
MASTER = "127.0.0.1:10911"


def registration(state_version: int, counter: int, address: str = MASTER
                 ) -> tuple[dict[str, str], bytes]:
    body = encode_register_broker_body(RegisterBrokerBody(
        DataVersion(state_version, counter, counter), {"t": TopicConfig("t", 4, 4)}),
        compressed=False)
    return {"clusterName": "DefaultCluster", "brokerName": "broker-a", "brokerId": "0",
            "brokerAddr": address, "haServerAddr": "", "enableActingMaster": "false",
            "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF)}, body


async def test_a_forged_state_version_does_not_lock_the_master_out(tmp_path) -> None:
    async with node_process("nameserver", "ns", tmp_path) as namesrv:
        async def register(node, state_version: int, counter: int, address: str = MASTER):
            fields, body = registration(state_version, counter, address)
            return await node.rpc.invoke(namesrv.address, REGISTER_BROKER, fields, body)

        async def routed_master(node) -> str:
            route = await node.rpc.invoke(namesrv.address, GET_ROUTEINFO_BY_TOPIC,
                                          {"topic": "t"})
            assert route.code == SUCCESS, route.remark
            (broker,) = TopicRouteData.decode(route.body).broker_datas
            return broker.broker_addrs[0]

        async with open_node(NodeConfig(name="master")) as master:
            assert (await register(master, 3, 1)).code == SUCCESS
            # Forged from a connection that then goes: nothing of it is left.
            async with open_node(NodeConfig(name="forger")) as forger:
                answer = await register(forger, 999, 1)
                assert answer.code == SYSTEM_ERROR
                assert answer.remark == (f"broker {MASTER}: state version 999 is more than 64 "
                                         "ahead of the registered 3")
                answer = await register(forger, 999, 1, "10.6.6.6:10911")
                assert answer.code == SYSTEM_ERROR
                assert "more than 64 ahead of the live master" in answer.remark
            for counter in (2, 3):
                answer = await register(master, 3, counter)
                assert answer.code == SUCCESS, answer.remark
            assert await routed_master(master) == MASTER

        # The master is away (its connection closed): a forger takes id 0 and stays.
        async with open_node(NodeConfig(name="forger")) as forger:
            answer = await register(forger, 999, 1, "10.6.6.6:10911")
            assert answer.code == SUCCESS, answer.remark
            assert await routed_master(forger) == "10.6.6.6:10911"
            async with open_node(NodeConfig(name="master")) as master:
                answer = await register(master, 3, 4)
                assert answer.code == SUCCESS, answer.remark
                assert await routed_master(master) == MASTER
                answer = await register(forger, 999, 2, "10.6.6.6:10911")
                assert answer.code == SYSTEM_ERROR
                assert "more than 64 ahead of the live master" in answer.remark
                assert await routed_master(master) == MASTER


async def test_a_forgery_slightly_ahead_in_the_masters_name_goes_with_its_connection(
        tmp_path) -> None:
    async with node_process("nameserver", "ns", tmp_path) as namesrv:
        async def register(node, state_version: int, counter: int):
            fields, body = registration(state_version, counter)
            return await node.rpc.invoke(namesrv.address, REGISTER_BROKER, fields, body)

        async with open_node(NodeConfig(name="master")) as master:
            assert (await register(master, 3, 1)).code == SUCCESS
            async with open_node(NodeConfig(name="forger")) as forger:
                # One epoch ahead, in the master's name: taken while it lasts...
                assert (await register(forger, 4, 1)).code == SUCCESS
                answer = await register(master, 3, 2)
                assert answer.code == SYSTEM_ERROR
                assert "state version 3 is older than 4" in answer.remark
            # ...and gone with the forger's connection: the master registers again.
            with trio.fail_after(10):  # until the name server has seen the close
                while (answer := await register(master, 3, 3)).code != SUCCESS:
                    assert "state version 3 is older than 4" in answer.remark
                    await trio.sleep(0.05)
            route = await master.rpc.invoke(namesrv.address, GET_ROUTEINFO_BY_TOPIC,
                                            {"topic": "t"})
            (broker,) = TopicRouteData.decode(route.body).broker_datas
            assert broker.broker_addrs[0] == MASTER
