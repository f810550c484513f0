"""Controller requests with bad names, ids and addresses over RPC (in-process transport).

Each is refused with its code and a remark naming the header field and the
value; nothing is proposed to Raft; the connection stays open and serves a
good request afterwards. A fuzz of the request headers: every answer has a
specific code, never SYSTEM_ERROR, a traceback or a server path.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from controller_service_helpers import controller_plugins, controllers, wait_leader
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from triomq.controller import RequestCode, ResponseCode
from triomq.controller.core.requests import REQUEST_CODES
from triomq.controller.service import ControllerService
from triomq.runtime import Node
from triomq.testing.cluster import Cluster, open_cluster

CLUSTER, GROUP = "DefaultCluster", "broker-x"
Code = ResponseCode
GOOD = {"clusterName": CLUSTER, "brokerName": GROUP}


@asynccontextmanager
async def one_controller(root: Path) -> AsyncIterator[tuple[Cluster, Node, str]]:
    """One controller (it leads at once) and a client node: (cluster, client, address)."""
    async with open_cluster(root, controllers=1, brokers=0, plugins=controller_plugins(),
                            controller={"raft": {"tick_interval_ms": 20, "fsync": False}}
                            ) as cluster:
        await cluster.start_controllers()
        client = await cluster.start("client")
        leader = await wait_leader(cluster)
        # A new leader's first entries (its term's no-op) apply after it leads: wait for
        # them, so what a test counts from here on is what its own requests caused.
        raft = controllers(cluster)[leader].raft
        await cluster.wait_for(lambda: raft.applied_index == raft.status()["last_index"])
        yield cluster, client, cluster.controller_addresses[leader]


def count_proposals(service: ControllerService) -> list[bytes]:
    """Every entry proposed to the service's Raft node from now on."""
    proposed: list[bytes] = []
    propose = service.raft.propose

    async def spy(data: bytes, **kwargs):
        proposed.append(data)
        return await propose(data, **kwargs)

    service.raft.propose = spy  # type: ignore[method-assign]
    return proposed


BAD = [
    (RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, {**GOOD, "brokerName": "broker x"},
     Code.CONTROLLER_INVALID_REQUEST, "'brokerName' 'broker x'"),
    (RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, {**GOOD, "clusterName": "c" * 200},
     Code.CONTROLLER_INVALID_REQUEST, "'clusterName' 'cccc"),
    (RequestCode.CONTROLLER_APPLY_BROKER_ID,
     {**GOOD, "appliedBrokerId": "0", "registerCheckCode": "10.0.0.1:10911;1"},
     Code.CONTROLLER_BROKER_ID_INVALID, "'appliedBrokerId' 0"),
    (RequestCode.CONTROLLER_APPLY_BROKER_ID,
     {**GOOD, "appliedBrokerId": "1", "registerCheckCode": "10.0.0.1:70000;1"},
     Code.CONTROLLER_INVALID_REQUEST, "'registerCheckCode', its address '10.0.0.1:70000'"),
    (RequestCode.CONTROLLER_REGISTER_BROKER, {**GOOD, "brokerId": "1", "brokerAddress": "10.0.0.1"},
     Code.CONTROLLER_INVALID_REQUEST, "'brokerAddress' '10.0.0.1'"),
    (RequestCode.CONTROLLER_REGISTER_BROKER, {**GOOD, "brokerId": "0", "brokerAddress": "h:1"},
     Code.CONTROLLER_BROKER_ID_INVALID, "'brokerId' 0"),
    (RequestCode.BROKER_HEARTBEAT, {**GOOD, "brokerId": "1", "brokerAddr": "h :1",
                                    "epoch": "0", "maxOffset": "0", "confirmOffset": "0",
                                    "electionPriority": "0"},
     Code.CONTROLLER_INVALID_REQUEST, "'brokerAddr' 'h :1'"),
    (RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, {"brokerName": GROUP, "masterBrokerId": "1",
                                                   "masterEpoch": "1"},
     Code.CONTROLLER_BROKER_ID_INVALID, "body 'syncStateSet': 0"),
    (RequestCode.CONTROLLER_ELECT_MASTER, {**GOOD, "brokerName": "../etc", "designateElect": "true",
                                "brokerId": "1"},
     Code.CONTROLLER_INVALID_REQUEST, "'brokerName' '../etc'"),
    (RequestCode.CLEAN_BROKER_DATA, {**GOOD, "brokerControllerIdsToClean": "2;0"},
     Code.CONTROLLER_BROKER_ID_INVALID, "'brokerControllerIdsToClean': 0"),
    (RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "a\tb"},
     Code.CONTROLLER_INVALID_REQUEST, "'brokerName' 'a\\tb'"),
]


async def test_bad_names_ids_and_addresses_are_refused_and_nothing_is_proposed(tmp_path):
    async with one_controller(tmp_path) as (cluster, client, address):
        service = controllers(cluster)["c1"]
        applied = service.raft.applied_index
        proposed = count_proposals(service)
        connection = await client.rpc.connection(address)
        for code, fields, expected, named in BAD:
            body = (b'{"syncStateSet":[1,0],"syncStateSetEpoch":1}'
                    if code == RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET else b"")
            answer = await client.rpc.invoke(address, code, fields, body)
            assert (answer.code, code) == (expected, code), answer.remark
            where = named if named.startswith("body") else f"header field {named}"
            assert f"{RequestCode(code).name}: {where}" in answer.remark
        assert proposed == [] and service.raft.applied_index == applied
        assert service.manager.groups == {}
        # The same connection serves a good request afterwards.
        assert await client.rpc.connection(address) is connection and not connection.closed
        answer = await client.rpc.invoke(address, RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, GOOD)
        assert answer.code == Code.SUCCESS and answer.ext_fields["nextBrokerId"] == "1"
        answer = await client.rpc.invoke(address, RequestCode.CONTROLLER_APPLY_BROKER_ID, {
            **GOOD, "appliedBrokerId": "1", "registerCheckCode": "10.0.0.1:10911;1"})
        assert answer.code == Code.SUCCESS, answer.remark
        assert len(proposed) == 1


# -- fuzz ----------------------------------------------------------------------------

KEYS = ["clusterName", "brokerName", "brokerId", "brokerAddress", "brokerAddr",
        "appliedBrokerId", "registerCheckCode", "masterBrokerId", "masterEpoch",
        "syncStateSetEpoch", "invokeTime", "designateElect",
        "brokerControllerIdsToClean", "isCleanLivingBroker", "epoch", "maxOffset", "confirmOffset",
        "electionPriority", "heartbeatTimeoutMills"]
values = st.one_of(
    st.sampled_from([CLUSTER, GROUP, "1", "2", "0", "-1", "true", "false", "1;2", "h:1",
                     "10.0.0.1:10911", "tcp://h:10911", "inproc://b", "", "9" * 25]),
    st.text(max_size=80), st.integers(-2**70, 2**70).map(str))
headers = st.dictionaries(st.sampled_from(KEYS), values, max_size=8).map(
    lambda fields: {**GOOD, **fields})
bodies = st.one_of(st.just(b""), st.binary(max_size=60),
                   st.sampled_from([b"{}", b"requestTimeout=5\n", b"[1]", b'["a", "b/c"]',
                                    b"controllerDLegerPeers=1\n", b'{"peers": 1}']))
requests = st.lists(st.tuples(st.sampled_from(sorted(REQUEST_CODES)), headers, bodies),
                    min_size=1, max_size=40)
SPECIFIC = set(Code) - {Code.SYSTEM_ERROR, Code.CONTROLLER_JRAFT_INTERNAL_ERROR}


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=requests)
async def test_every_request_gets_a_specific_answer_and_no_leak(tmp_path, batch):
    async with one_controller(tmp_path) as (_, client, address):
        for code, fields, body in batch:
            answer = await client.rpc.invoke(address, code, fields, body)
            remark = answer.remark or ""
            assert answer.code in SPECIFIC, (code, fields, answer.code, remark)
            assert "Traceback" not in remark and str(tmp_path) not in remark
            assert ".py" not in remark, remark
        answer = await client.rpc.invoke(address, RequestCode.CONTROLLER_GET_METADATA_INFO)
        assert answer.code == Code.SUCCESS
