"""The controller reads RocketMQ 5's mqadmin makes, as it makes them, over real TCP.

``getControllerMetaData`` (1005), ``getSyncStateSet`` (1005 for the leader's
address, then 1006 to it), ``getControllerConfig`` (1010),
``updateControllerConfig`` (1009), ``electMaster`` (1002) and
``cleanBrokerMetadata`` (1011) and, to each broker, ``getBrokerEpoch``
(1007). The frames are built here byte by byte from RocketMQ's remoting
layout, as ``RemotingCommand.createRequestCommand(code, header)`` makes them
(the header's non-null fields as extFields strings), and the answers are
compared with what RocketMQ's classes give, written out by hand:
GetMetaDataResponseHeader and ElectMasterResponseHeader in extFields,
BrokerReplicasInfo, ElectMasterResponseBody, EpochEntryCache,
``Configuration.getAllConfigsFormatString``.
"""

from __future__ import annotations

import json
import struct

import trio
from controller_service_helpers import (
    controllers,
    group_at,
    put,
    wait_full_sync_state_set,
    wait_leader,
)

from triomq.testing.cluster import BROKER_NAME

GET_METADATA_INFO, GET_SYNC_STATE_DATA, GET_BROKER_EPOCH_CACHE = 1005, 1006, 1007
UPDATE_CONTROLLER_CONFIG, GET_CONTROLLER_CONFIG = 1009, 1010
ELECT_MASTER, CLEAN_BROKER_DATA = 1002, 1011
LONG_MAX = 9223372036854775807


async def receive_exactly(stream: trio.SocketStream, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = await stream.receive_some(size - len(data))
        assert chunk, "the peer closed the connection"
        data += chunk
    return data


async def call(address: str, code: int, body: bytes = b"",
               fields: dict[str, str] | None = None) -> tuple[dict, bytes]:
    """One request on a new connection to ``address`` (``host:port``, as RocketMQ names
    it), with ``fields`` as extFields; the answer's JSON header and its body."""
    command = {"code": code, "flag": 0, "language": "JAVA", "opaque": 7,
               "serializeTypeCurrentRPC": "JSON", "version": 475}
    if fields is not None:
        command["extFields"] = fields
    header = json.dumps(command).encode()
    host, _, port = address.rpartition(":")
    async with await trio.open_tcp_stream(host, int(port)) as stream:
        await stream.send_all(struct.pack(">iI", 4 + len(header) + len(body), len(header))
                              + header + body)
        (length,) = struct.unpack(">i", await receive_exactly(stream, 4))
        rest = await receive_exactly(stream, length)
    header_length = struct.unpack_from(">I", rest)[0] & 0xFFFFFF
    answer = json.loads(rest[4:4 + header_length])
    assert (answer["opaque"], answer["flag"] & 1) == (7, 1)
    return answer, rest[4 + header_length:]


def plain(address: str) -> str:
    return address.removeprefix("tcp://")


async def test_mqadmin_controller_reads(make_cluster):
    # Slow liveness: a busy machine must not elect another master mid-test.
    async with make_cluster(transport="tcp",
                            controller={"broker_not_active_timeout": 3000}) as cluster:
        await cluster.start_controllers()
        await cluster.start_brokers()
        master = await cluster.wait_master()
        await wait_full_sync_state_set(cluster, master)
        leader = await wait_leader(cluster)
        services = controllers(cluster)
        await cluster.wait_for(lambda: all(s.raft.leader_id == services[leader].raft.node_id
                                           for s in services.values()))
        addresses = {name: plain(a) for name, a in cluster.controller_addresses.items()}
        ids = {name: str(services[name].raft.node_id) for name in addresses}
        peers = "".join(f"{ids[n]}:{addresses[n]};" for n in sorted(addresses, key=ids.get))

        # getControllerMetaData: every controller answers in its header, no body.
        for name, address in addresses.items():
            header, body = await call(address, GET_METADATA_INFO)
            assert (header["code"], body) == (0, b"")
            assert header["extFields"] == {
                "group": "DefaultControllerGroup", "controllerLeaderId": ids[leader],
                "controllerLeaderAddress": addresses[leader],
                "isLeader": "true" if name == leader else "false", "peers": peers}

        # getSyncStateSet: the names as fastjson's list, to the leader's address.
        header, body = await call(addresses[leader], GET_SYNC_STATE_DATA, b'["broker-a"]')
        assert header["code"] == 0, header
        replicas = sorted((cluster.broker(n).broker_id, plain(cluster.broker(n).node.address))
                          for n in cluster.broker_names)
        master_id = cluster.broker(master).broker_id
        group = group_at(cluster, leader)
        assert json.loads(body) == {"replicasInfoTable": {"broker-a": {
            "masterBrokerId": master_id,
            "masterAddress": plain(cluster.broker(master).node.address),
            "masterEpoch": 1, "syncStateSetEpoch": group.sync_state_set_epoch,
            "inSyncReplicas": [{"brokerName": "broker-a", "brokerId": i, "brokerAddress": a,
                                "alive": True} for i, a in replicas],
            "notInSyncReplicas": []}}}
        header, body = await call(addresses[leader], GET_SYNC_STATE_DATA, b'["broker-x"]')
        assert (header["code"], json.loads(body)) == (0, {"replicasInfoTable": {}})

        # getBrokerEpoch: each broker's EpochEntryCache; a master's id reads 0.
        node = await cluster.start("client")
        await put(node, cluster.broker(master), b"one message")
        for name in cluster.broker_names:
            broker = cluster.broker(name)
            await cluster.wait_for(lambda b=broker: b.log.max_offset > 0)
            header, body = await call(plain(broker.node.address), GET_BROKER_EPOCH_CACHE)
            assert header["code"] == 0, header
            assert json.loads(body) == {
                "clusterName": "DefaultCluster", "brokerName": BROKER_NAME,
                "brokerId": 0 if name == master else broker.broker_id,
                "epochList": [{"epoch": 1, "startOffset": 0, "endOffset": LONG_MAX}],
                "maxOffset": broker.log.max_offset}

        # getControllerConfig: properties text, sorted, RocketMQ's names.
        address = addresses["c1"]
        header, body = await call(address, GET_CONTROLLER_CONFIG)
        assert header["code"] == 0, header
        peer_list = ";".join(f"{ids[n]}-{addresses[n]}" for n in sorted(addresses, key=ids.get))
        assert body.decode() == (
            "brokerNotActiveTimeoutMillis=3000\n"
            "controllerDLegerGroup=DefaultControllerGroup\n"
            f"controllerDLegerPeers={peer_list}\n"
            "controllerDLegerSelfId=1\n"
            "electionPolicy=default\n"
            "enableControllerInNamesrv=false\n"
            "enableElectUncleanMaster=false\n"
            "notifyBrokerRoleChanged=true\n"
            "requestTimeout=3000\n"
            "scanNotActiveBrokerInterval=100\n")

        # updateControllerConfig: MixAll.properties2String of -k/-v.
        header, _ = await call(address, UPDATE_CONTROLLER_CONFIG,
                               b"scanNotActiveBrokerInterval=250\n")
        assert header["code"] == 0, header
        _, body = await call(address, GET_CONTROLLER_CONFIG)
        assert "scanNotActiveBrokerInterval=250\n" in body.decode()
        header, _ = await call(address, UPDATE_CONTROLLER_CONFIG, b"controllerDLegerSelfId=2\n")
        assert header["code"] == 2005, header  # CONTROLLER_INVALID_REQUEST
        assert "node_id (controllerDLegerSelfId) cannot change at run time" in header["remark"]
        header, _ = await call(address, UPDATE_CONTROLLER_CONFIG, b"configStorePath=/tmp/x\n")
        assert (header["code"], header["remark"]) == (16, "Can not update config in black list.")


async def test_mqadmin_elect_master_and_clean_broker_metadata(make_cluster):
    async with make_cluster(transport="tcp",
                            controller={"broker_not_active_timeout": 3000}) as cluster:
        await cluster.start_controllers()
        await cluster.start_brokers()
        master = await cluster.wait_master()
        await wait_full_sync_state_set(cluster, master)
        leader = plain(cluster.controller_addresses[await wait_leader(cluster)])
        brokers = {cluster.broker(n).broker_id: plain(cluster.broker(n).node.address)
                   for n in cluster.broker_names}
        old_id = cluster.broker(master).broker_id
        new_id = min(set(brokers) - {old_id})
        epoch = group_at(cluster, await wait_leader(cluster)).sync_state_set_epoch

        # electMaster -b: ElectMasterRequestHeader.ofAdminTrigger, invokeTime included.
        elect = {"clusterName": "DefaultCluster", "brokerName": BROKER_NAME,
                 "brokerId": str(new_id), "designateElect": "true",
                 "invokeTime": "1700000000000"}
        header, body = await call(leader, ELECT_MASTER, fields=elect)
        assert (header["code"], header.get("remark")) == (0, None), header
        assert header["extFields"] == {
            "masterBrokerId": str(new_id), "masterAddress": brokers[new_id],
            "masterEpoch": "2", "syncStateSetEpoch": str(epoch + 1)}
        members = {"cluster": "DefaultCluster", "brokerName": BROKER_NAME,
                   "brokerAddrs": {str(i): a for i, a in brokers.items()}}
        # ElectMasterResponseBody for a broker, BrokerMemberGroup for mqadmin.
        assert json.loads(body) == {**members, "brokerMemberGroup": members,
                                    "syncStateSet": [new_id]}

        # The same again: the master stands, answered with it (a broker follows it).
        header, body = await call(leader, ELECT_MASTER, fields=elect)
        assert header["code"] == 2011, header  # CONTROLLER_MASTER_STILL_EXIST
        assert header["extFields"]["masterBrokerId"] == str(new_id)
        assert json.loads(body)["syncStateSet"] == [new_id]
        header, body = await call(leader, ELECT_MASTER,
                                  fields={**elect, "brokerName": "broker-x"})
        assert header["code"] == 2010, header  # CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
        assert (header.get("extFields", {}), body) == ({}, b"")

        # cleanBrokerMetadata: a living replica only with -l; -l leaves the cluster out.
        clean = {"brokerName": BROKER_NAME, "brokerControllerIdsToClean": str(old_id),
                 "isCleanLivingBroker": "false", "invokeTime": "1700000000000"}
        header, _ = await call(leader, CLEAN_BROKER_DATA,
                               fields={**clean, "clusterName": "DefaultCluster"})
        assert header["code"] == 2009, header  # CONTROLLER_INVALID_CLEAN_BROKER_METADATA
        assert f"brokers [{old_id}]" in header["remark"]
        header, body = await call(leader, CLEAN_BROKER_DATA,
                                  fields={**clean, "isCleanLivingBroker": "true"})
        assert (header["code"], body) == (0, b""), header
        group = group_at(cluster, await wait_leader(cluster))
        assert old_id not in group.broker_ids and new_id in group.broker_ids
