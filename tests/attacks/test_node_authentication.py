"""With ``[security] inner_client_access_key`` the nodes authenticate each other.

Two broker replicas run as ``python -m triomq.cli broker`` processes in
controller mode with ``all_ack_in_sync_state_set`` and the cluster's secret
in a file; three controllers and a name server run in the test's process,
over TCP, with the same secret. The cluster elects, takes messages and
hands them to a consumer group as without security, while a node of the
network without the secret (the test's client) is refused every
cluster-internal request, a captured signed request is refused when
replayed or sent under another code, and HA acks forged for a paused slave
count for nothing: the master acknowledges no put for that slave.
"""

from __future__ import annotations

import signal
import sys
import tomllib
import zlib
from pathlib import Path

import trio
from processes import NodeProcess

from triomq.client import ConsumeFromWhere, LitePullConsumer, Message, Producer
from triomq.client.core.errors import ClientError
from triomq.clock import wall_ms
from triomq.controller.client import ControllerClient, ReplicaInfo
from triomq.node_auth import InnerAuth, NonceCache
from triomq.protocol.ha import Credential, SlaveHandshake, encode
from triomq.protocol.route import TopicRouteData
from triomq.rpc import RpcError
from triomq.testing.cluster import BROKER_NAME, open_cluster
from triomq.testing.direct_send import DirectProducer, SendError, ServiceNotAvailable

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "chaos"))
from broker_processes import replica_sections, wait_group

SECRET = "the-cluster-secret-of-this-test"
SECURITY = {"inner_client_access_key": "cluster", "inner_client_secret_key": SECRET}
TOPIC = "Audited"
NO_PERMISSION, SUCCESS = 16, 0
REGISTER_BROKER, UNREGISTER_BROKER, GET_ROUTEINFO_BY_TOPIC = 103, 104, 105
QUERY_DATA_VERSION, CREATE_TOPIC = 322, 17
ALTER_SYNC_STATE_SET, CONTROLLER_REGISTER_BROKER = 1001, 1003


def refused(answer, remark: str) -> None:
    assert answer.code == NO_PERMISSION, (answer.code, answer.remark)
    assert remark in (answer.remark or ""), answer.remark
    assert SECRET not in (answer.remark or "")


class SecuredGroup:
    """The cluster of this module's tests and its two broker processes."""

    def __init__(self, cluster, replicas: list[NodeProcess], info: ReplicaInfo) -> None:
        self.cluster = cluster
        self.replicas = replicas
        self.info = info
        self.master = next(r for r in replicas if r.address == info.master_address)
        self.slave = next(r for r in replicas if r is not self.master)

    @property
    def namesrv(self) -> str:
        return self.cluster.namesrv_addresses["n1"]

    def ha_port(self, replica: NodeProcess) -> int:
        return tomllib.loads(replica.config.read_text())["broker"]["ha_listen_port"]


async def run_secured_group(tmp_path: Path, test) -> None:
    secret_file = tmp_path / "cluster.secret"
    secret_file.write_text(SECRET + "\n")
    security = ('\n[security]\ninner_client_access_key = "cluster"\n'
                f'inner_client_secret_file = "{secret_file}"\n')
    async with open_cluster(tmp_path, transport="tcp", brokers=0, namesrvs=1,
                            security=SECURITY) as cluster:
        await cluster.start_namesrvs()
        await cluster.start_controllers()
        client = await cluster.start("client")  # not the cluster's: no secret
        controller_addresses = list(cluster.controller_addresses.values())
        namesrv = cluster.namesrv_addresses["n1"].removeprefix("tcp://")
        replicas = [NodeProcess("broker", f"b{i}", tmp_path, replica_sections(
            tmp_path / f"b{i}", controller_addresses, namesrv) + security) for i in (1, 2)]
        try:
            for replica in replicas:
                await replica.start()
            controllers = ControllerClient(client.rpc, controller_addresses)
            info = await wait_group(controllers, {r.address for r in replicas}, in_sync=2)
            await test(SecuredGroup(cluster, replicas, info), client, controllers)
            for replica in replicas:
                replica.check_running()
        finally:
            for replica in replicas:
                if replica.process is not None:
                    replica.process.send_signal(signal.SIGCONT)
                    await replica.stop()


async def routed_master(client, namesrv: str) -> str | None:
    route = await client.rpc.invoke(namesrv, GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})
    assert route.code == SUCCESS, route.remark
    (broker,) = TopicRouteData.decode(route.body).broker_datas
    return broker.broker_addrs.get(0)


async def test_a_secured_cluster_works_and_refuses_strangers(tmp_path: Path) -> None:
    async def test(group: SecuredGroup, client, controllers) -> None:
        master = group.master.address
        answer = await client.rpc.invoke(master, CREATE_TOPIC, {
            "topic": TOPIC, "readQueueNums": "2", "writeQueueNums": "2", "perm": "6"})
        assert answer.code == SUCCESS, answer.remark
        namesrv = group.namesrv.removeprefix("tcp://")
        # Elected, and now sends and a consumer group's reads, through the name server.
        expected = {b"m%d" % i for i in range(10)}
        async with Producer("writers", [namesrv]).start(client.connect) as producer:
            for body in sorted(expected):
                with trio.fail_after(60):
                    while True:  # until the name server routes the new topic
                        try:
                            await producer.send(Message(TOPIC, body))
                            break
                        except (ClientError, RpcError):
                            await trio.sleep(0.1)
        reader = LitePullConsumer("readers", [namesrv],
                                  consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        reader.subscribe(TOPIC, "*")
        got: set[bytes] = set()
        async with reader.start(client.connect):
            with trio.fail_after(60):
                while got != expected:
                    got |= {m.body for m in await reader.poll(timeout=1)}
                    assert got <= expected, got
        master_host = master.removeprefix("tcp://")
        assert await routed_master(client, group.namesrv) == master_host

        # Unsigned internal requests from a stranger are refused, whatever they name.
        fields = {"clusterName": "DefaultCluster", "brokerName": BROKER_NAME, "brokerId": "0",
                  "brokerAddr": master_host}
        refused(await client.rpc.invoke(group.namesrv, UNREGISTER_BROKER, fields),
                "UNREGISTER_BROKER (104) is cluster-internal: it carries no AccessKey")
        body = b'{"dataVersion":{"stateVersion":999,"timestamp":1,"counter":1}}'
        refused(await client.rpc.invoke(group.namesrv, REGISTER_BROKER, {
            **fields, "haServerAddr": "", "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF)},
            body), "REGISTER_BROKER (103) is cluster-internal")
        for address in group.cluster.controller_addresses.values():
            refused(await client.rpc.invoke(address, ALTER_SYNC_STATE_SET, {
                "brokerName": BROKER_NAME, "masterAddress": "10.6.6.6:10911",
                "masterEpoch": "99"}), "CONTROLLER_ALTER_SYNC_STATE_SET (1001)")
            refused(await client.rpc.invoke(address, CONTROLLER_REGISTER_BROKER, {
                "clusterName": "DefaultCluster", "brokerName": BROKER_NAME,
                "brokerAddress": "10.6.6.6:10911", "brokerId": "9"}),
                "CONTROLLER_REGISTER_BROKER (1003)")
        # A signed QUERY_DATA_VERSION, as captured on the wire: it passes once; again, or
        # with its code swapped for UNREGISTER_BROKER (the same fields), it is refused.
        captured = InnerAuth("cluster", SECRET, group.slave.address, NonceCache(30_000)).sign(
            QUERY_DATA_VERSION, fields, body, now_ms=wall_ms(), nonce="captured-1")
        answer = await client.rpc.invoke(group.namesrv, QUERY_DATA_VERSION, captured, body)
        assert answer.code != NO_PERMISSION, answer.remark
        refused(await client.rpc.invoke(group.namesrv, QUERY_DATA_VERSION, captured, body),
                "Nonce 'captured-1' was used already: a replayed request")
        refused(await client.rpc.invoke(group.namesrv, UNREGISTER_BROKER, captured, body),
                "the signature is for request code 322, not 104 (a request swapped")
        # The group is as it was: same master, routed, both replicas in sync.
        assert await routed_master(client, group.namesrv) == master_host
        info = await controllers.get_replica_info(BROKER_NAME)
        assert (info.master_address, info.master_epoch, len(info.sync_state_set)) == (
            group.info.master_address, group.info.master_epoch, 2)

    await run_secured_group(tmp_path, test)


async def test_forged_ha_acks_are_refused_and_the_master_does_not_acknowledge(
        tmp_path: Path) -> None:
    async def test(group: SecuredGroup, client, controllers) -> None:
        producer = DirectProducer(client.rpc, group.master.address, timeout=10.0)
        with trio.fail_after(60):  # until the master has taken its role
            while True:
                try:
                    await producer.send("t", b"first")
                    break
                except ServiceNotAvailable:
                    await trio.sleep(0.05)
        # What its handshake names: the other member of the SyncStateSet.
        (slave_id,) = group.info.sync_state_set - {group.info.master_broker_id}
        ha_port = group.ha_port(group.master)
        group.slave.process.send_signal(signal.SIGSTOP)
        # The forger claims the paused slave: no credential, then a made-up one.
        forged = InnerAuth("cluster", "a-guess", group.slave.address, NonceCache(30_000))
        openings = [encode(SlaveHandshake(slave_id)),
                    encode(Credential(tuple(sorted(forged.handshake_credential(
                        slave_id, now_ms=wall_ms(), nonce="f").items()))))
                    + encode(SlaveHandshake(slave_id))]
        refusals = 0
        acknowledged: list[int] = []
        failed = 0

        async def forge() -> None:
            # The forger would read the master's handshake (its max offset) and ack
            # it in the slave's name; the master closes the connection unanswered.
            nonlocal refusals
            while refusals < 20:
                stream = await trio.open_tcp_stream("127.0.0.1", ha_port)
                await stream.send_all(openings[refusals % 2])
                with trio.fail_after(30):
                    try:
                        answer = await stream.receive_some(1024)
                    except trio.BrokenResourceError:
                        answer = b""
                assert answer == b"", "the master answered a forged handshake"
                await stream.aclose()
                refusals += 1

        async def put() -> None:
            nonlocal failed
            for n in range(3):
                try:
                    result = await producer.send("t", b"while paused %d" % n)
                except (SendError, RpcError):
                    failed += 1
                    continue
                acknowledged.append(result.queue_offset)
                # Acknowledged only once the master stands alone in its SyncStateSet:
                # no forged ack made it the slave's.
                info = await controllers.get_replica_info(BROKER_NAME)
                assert info.sync_state_set == {group.info.master_broker_id}, info

        async with trio.open_nursery() as nursery:
            nursery.start_soon(forge)
            nursery.start_soon(put)
        assert refusals == 20 and failed + len(acknowledged) == 3
        # The real slave, resumed, proves itself and is back in sync.
        group.slave.process.send_signal(signal.SIGCONT)
        await wait_group(controllers, {group.master.address}, in_sync=2)

    await run_secured_group(tmp_path, test)
