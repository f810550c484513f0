"""Controller requests over RPC: bad input is refused with the right code, state untouched."""

from __future__ import annotations

import pytest
from controller_service_helpers import controllers, wait_leader

from triomq.controller import RequestCode, ResponseCode
from triomq.controller.client import ControllerClient, ControllerError
from triomq.controller.core.requests import BrokerHeartbeat
from triomq.controller.core.wire import read_metadata
from triomq.protocol.java_properties import load_properties

CLUSTER, GROUP = "DefaultCluster", "broker-x"
Code = ResponseCode


async def registered_group(client: ControllerClient) -> None:
    """Group broker-x with replica 1 (master, epoch 1) and replica 2."""
    for broker_id in (1, 2):
        assert await client.get_next_broker_id(CLUSTER, GROUP) == broker_id
        await client.apply_broker_id(CLUSTER, GROUP, broker_id,
                                     f"inproc://x{broker_id};{broker_id}")
        await client.register_broker(CLUSTER, GROUP, broker_id, f"inproc://x{broker_id}")
    info = await client.elect_master(CLUSTER, GROUP, broker_id=1)
    assert (info.master_broker_id, info.master_epoch, info.sync_state_set) == (1, 1, {1})


async def test_bad_requests_are_refused_and_change_nothing(make_cluster):
    async with make_cluster() as cluster:
        await cluster.start_controllers()
        node = await cluster.start("client")
        addresses = list(cluster.controller_addresses.values())
        client = ControllerClient(node.rpc, addresses)
        await registered_group(client)
        leader = await wait_leader(cluster)
        leader_address = cluster.controller_addresses[leader]
        services = controllers(cluster)
        await cluster.wait_for(lambda: len({s.manager.snapshot() for s in services.values()}) == 1)
        before = {n: s.manager.snapshot() for n, s in services.items()}

        async def refused(call) -> ControllerError:
            with pytest.raises(ControllerError) as error:
                await call
            return error.value

        async def heartbeat(cluster_name: str, group: str, broker_id: int) -> int:
            return await client.heartbeat(
                BrokerHeartbeat(cluster_name, group, broker_id, "inproc://x9", epoch=1),
                address=leader_address)

        assert await heartbeat(CLUSTER, "no-such-group", 1) == (
            Code.CONTROLLER_BROKER_METADATA_NOT_EXIST)
        assert await heartbeat(CLUSTER, GROUP, 9) == Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
        assert await heartbeat("OtherCluster", GROUP, 1) == Code.CONTROLLER_INVALID_REQUEST
        # A broker claiming an id another one owns (check-code mismatch).
        error = await refused(client.apply_broker_id(CLUSTER, GROUP, 2, "inproc://evil;1"))
        assert error.code == Code.CONTROLLER_BROKER_ID_INVALID
        assert "check code" in error.remark
        error = await refused(client.register_broker(CLUSTER, GROUP, 7, "inproc://x7"))
        assert error.code == Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
        # Stale epochs are fenced.
        error = await refused(client.alter_sync_state_set(GROUP, 1, 0, 1, {1, 2}))
        assert error.code == Code.CONTROLLER_FENCED_MASTER_EPOCH
        error = await refused(client.alter_sync_state_set(GROUP, 1, 1, 0, {1, 2}))
        assert error.code == Code.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
        error = await refused(client.alter_sync_state_set(GROUP, 2, 1, 1, {1, 2}))
        assert error.code == Code.CONTROLLER_INVALID_MASTER
        error = await refused(client.elect_master(CLUSTER, GROUP, broker_id=5, designate=True))
        assert error.code == Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
        error = await refused(client.get_replica_info("no-such-group"))
        assert error.code == Code.CONTROLLER_BROKER_METADATA_NOT_EXIST
        error = await refused(client.clean_broker_data(CLUSTER, GROUP, broker_ids=[8]))
        assert error.code == Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
        # Malformed headers name the field.
        response = await node.rpc.invoke(leader_address, RequestCode.CONTROLLER_REGISTER_BROKER, {
            "clusterName": CLUSTER, "brokerName": GROUP, "brokerId": "one",
            "brokerAddress": "inproc://x1"})
        assert response.code == Code.CONTROLLER_INVALID_REQUEST
        assert "brokerId" in response.remark
        response = await node.rpc.invoke(
            leader_address, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, {"brokerName": GROUP})
        assert response.code == Code.CONTROLLER_INVALID_REQUEST
        assert "masterBrokerId" in response.remark

        assert {n: s.manager.snapshot() for n, s in services.items()} == before


async def test_followers_point_at_the_leader(make_cluster):
    async with make_cluster() as cluster:
        await cluster.start_controllers()
        node = await cluster.start("client")
        leader = await wait_leader(cluster)
        leader_address = cluster.controller_addresses[leader]
        services = controllers(cluster)
        await cluster.wait_for(lambda: all(s.raft.leader_address == leader_address
                                           for s in services.values()))
        for name, address in cluster.controller_addresses.items():
            response = await node.rpc.invoke(address, RequestCode.CONTROLLER_GET_REPLICA_INFO,
                                             {"brokerName": GROUP})
            if name == leader:
                assert response.code == Code.CONTROLLER_BROKER_METADATA_NOT_EXIST
            else:
                assert response.code == Code.CONTROLLER_NOT_LEADER
                assert response.ext_fields["leaderAddress"] == leader_address
                assert response.ext_fields["leaderId"] == str(services[leader].raft.node_id)
            # Metadata comes from any controller.
            response = await node.rpc.invoke(address, RequestCode.CONTROLLER_GET_METADATA_INFO)
            metadata = read_metadata(response.ext_fields)
            assert (metadata.leader_address, len(metadata.peers)) == (leader_address, 3)
            assert metadata.is_leader == (name == leader)
        # A client that starts at a follower follows the hint.
        follower = next(a for n, a in cluster.controller_addresses.items() if n != leader)
        client = ControllerClient(node.rpc, [follower, leader_address])
        await registered_group(client)
        assert client.leader == leader_address


async def test_controller_config_get_and_update(make_cluster):
    async with make_cluster() as cluster:
        await cluster.start_controllers()
        node = await cluster.start("client")
        address = cluster.controller_addresses["c1"]
        client = ControllerClient(node.rpc, [address])
        config = await client.get_controller_config(address)
        assert config["enableElectUncleanMaster"] == "false"
        assert config["controllerDLegerPeers"].startswith(f"1-{address};")
        await client.update_controller_config(address, {"broker_not_active_timeout": 900})
        assert controllers(cluster)["c1"].config.broker_not_active_timeout == 900
        for bad in ({"peers": {}}, {"broker_not_active_timeout": -1},
                    {"election_policy": "no-such-policy"}):
            with pytest.raises(ControllerError) as error:
                await client.update_controller_config(address, bad)
            assert error.value.code == Code.CONTROLLER_INVALID_REQUEST
        response = await node.rpc.invoke(address, RequestCode.GET_CONTROLLER_CONFIG)
        assert load_properties(response.body)["brokerNotActiveTimeoutMillis"] == "900"
