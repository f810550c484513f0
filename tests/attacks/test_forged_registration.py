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

import json
import zlib

import trio
from processes import node_process

from triomq.config import NodeConfig
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.route import (
    DataVersion,
    RegisterBrokerBody,
    TopicConfig,
    TopicRouteData,
    encode_register_broker_body,
)
from triomq.runtime import open_node
from triomq.testing.cluster import free_tcp_port

REGISTER_BROKER = 103
GET_BROKER_EPOCH_CACHE = 1007
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


def registrar(namesrv: str):
    """REGISTER_BROKER to ``namesrv`` from a node, as the group's master."""
    async def register(node, state_version: int, counter: int, address: str = MASTER):
        fields, body = registration(state_version, counter, address)
        return await node.rpc.invoke(namesrv, REGISTER_BROKER, fields, body)
    return register


async def routed_master(node, namesrv: str) -> str:
    route = await node.rpc.invoke(namesrv, GET_ROUTEINFO_BY_TOPIC, {"topic": "t"})
    assert route.code == SUCCESS, route.remark
    (broker,) = TopicRouteData.decode(route.body).broker_datas
    return broker.broker_addrs[0]


async def test_a_forged_state_version_does_not_lock_the_master_out(tmp_path) -> None:
    async with node_process("nameserver", "ns", tmp_path) as namesrv:
        register = registrar(namesrv.address)

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
            assert await routed_master(master, namesrv.address) == MASTER

        # The master is away (its connection closed): a forger takes id 0 and stays.
        async with open_node(NodeConfig(name="forger")) as forger:
            answer = await register(forger, 999, 1, "10.6.6.6:10911")
            assert answer.code == SUCCESS, answer.remark
            assert await routed_master(forger, namesrv.address) == "10.6.6.6:10911"
            async with open_node(NodeConfig(name="master")) as master:
                answer = await register(master, 3, 4)
                assert answer.code == SUCCESS, answer.remark
                assert await routed_master(master, namesrv.address) == MASTER
                answer = await register(forger, 999, 2, "10.6.6.6:10911")
                assert answer.code == SYSTEM_ERROR
                assert "more than 64 ahead of the live master" in answer.remark
                assert await routed_master(master, namesrv.address) == MASTER


async def test_a_forgery_slightly_ahead_in_the_masters_name_goes_with_its_connection(
        tmp_path) -> None:
    async with node_process("nameserver", "ns", tmp_path) as namesrv:
        register = registrar(namesrv.address)

        async with open_node(NodeConfig(name="master")) as master:
            assert (await register(master, 3, 1)).code == SUCCESS
            async with open_node(NodeConfig(name="forger")) as forger:
                # One epoch ahead, in the master's name: taken while it lasts...
                assert (await register(forger, 4, 1)).code == SUCCESS
                answer = await register(master, 3, 2)
                assert answer.code == SYSTEM_ERROR
                assert answer.remark == (f"broker {MASTER}: DataVersion (3, 2, 2) is older "
                                         "than the registered (4, 1, 1)")
            # ...and gone with the forger's connection: the master registers again.
            with trio.fail_after(10):  # until the name server has seen the close
                while (answer := await register(master, 3, 3)).code != SUCCESS:
                    assert "older than the registered (4, 1, 1)" in answer.remark
                    await trio.sleep(0.05)
            route = await master.rpc.invoke(namesrv.address, GET_ROUTEINFO_BY_TOPIC,
                                            {"topic": "t"})
            (broker,) = TopicRouteData.decode(route.body).broker_datas
            assert broker.broker_addrs[0] == MASTER


async def test_a_forgery_slightly_ahead_in_a_made_up_address_goes_with_its_connection(
        tmp_path) -> None:
    made_up = f"127.0.0.1:{free_tcp_port()}"  # nothing listens there
    async with node_process("nameserver", "ns", tmp_path) as namesrv:
        register = registrar(namesrv.address)

        async with open_node(NodeConfig(name="master")) as master:
            assert (await register(master, 3, 1)).code == SUCCESS
            async with open_node(NodeConfig(name="forger")) as forger:
                assert (await register(forger, 4, 1, made_up)).code == SUCCESS
            with trio.fail_after(10):  # until the name server has seen the close
                while (answer := await register(master, 3, 2)).code != SUCCESS:
                    assert "held by" in answer.remark
                    await trio.sleep(0.05)
            assert await routed_master(master, namesrv.address) == MASTER


async def test_a_newer_master_that_vouches_keeps_the_deposed_one_out(tmp_path) -> None:
    asked = trio.Event()

    async def epoch_cache(request: RemotingCommand, peer) -> RemotingCommand:
        asked.set()
        # RocketMQ's EpochEntryCache as fastjson writes it: the master of epoch 5.
        return RemotingCommand(code=SUCCESS, body=json.dumps({
            "brokerId": 0, "brokerName": "broker-a", "clusterName": "DefaultCluster",
            "epochList": [{"endOffset": 9223372036854775807, "epoch": 5, "startOffset": 0}],
            "maxOffset": 100}).encode())

    async def answering(node, task_status) -> None:
        node.rpc_server.register(GET_BROKER_EPOCH_CACHE, epoch_cache)
        task_status.started()
        await trio.sleep_forever()

    async with (
        node_process("nameserver", "ns", tmp_path) as namesrv,
        open_node(NodeConfig(name="new", listen="tcp://127.0.0.1:0"),
                  services={"answers": answering}) as new,
    ):
        new_address = new.address.removeprefix("tcp://")

        register = registrar(namesrv.address)

        async with open_node(NodeConfig(name="master")) as deposed:
            assert (await register(deposed, 3, 1)).code == SUCCESS
            async with open_node(NodeConfig(name="registration")) as connection:
                assert (await register(connection, 5, 1, new_address)).code == SUCCESS
                with trio.fail_after(10):
                    await asked.wait()
            # The new master's registration is gone with its connection, its vouch is
            # not: a probe one epoch ahead of the deposed master is refused as soon as
            # the name server has the answer (until then it is taken, and leaves
            # nothing when its connection goes).
            with trio.fail_after(10):
                while True:
                    async with open_node(NodeConfig(name="probe")) as probe:
                        answer = await register(probe, 4, 1, f"127.0.0.1:{free_tcp_port()}")
                    if answer.code != SUCCESS and "older than 5" in answer.remark:
                        break
                    await trio.sleep(0.05)
            answer = await register(deposed, 3, 2)
            assert answer.code == SYSTEM_ERROR
            assert answer.remark == (f"broker broker-a id 0: {MASTER}'s state version 3 is "
                                     "older than 5, a master's of the group")
