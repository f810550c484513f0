"""Transactions while a slave acts for its absent master, under trio's ``MockClock``.

Group a (a0 master, a1 slave) and group b (b0 master) share a name server.
A transactional producer sends its half message to a0; then a0 stops and
a1 acts. a1 answers END_TRANSACTION (37, ``EndTransactionRequestHeader``'s
fields, built by hand) as a master would: a commit's real message lands
on b0 through the acting escape bridge (``container`` in the same process,
``remote`` over TCP), a rollback puts nothing. A half message left open is
escaped to b0 as a half message there, whose check asks the producer and
commits it; with no master to escape to, it stays where it is until the
next round finds one. a1's own commit log never moves meanwhile. A slave that is not
acting answers END_TRANSACTION with SLAVE_NOT_AVAILABLE, as RocketMQ's does.
The waits are liveness bounds; times are the brokers' (mock) clocks.
"""

from __future__ import annotations

import json
import math

import pytest
import trio
from acting_nodes import GET_ROUTEINFO_BY_TOPIC, Groups, acting_namesrv, create_topic, wait_for
from trio.testing import MockClock

from triomq.client import LocalTransactionState, Message, MessageExt, TransactionProducer
from triomq.client.core.message import decode_messages
from triomq.testing.cluster import open_cluster

END_TRANSACTION, PULL_MESSAGE = 37, 11
SUCCESS, SYSTEM_ERROR, SLAVE_NOT_AVAILABLE, PULL_NOT_FOUND = 0, 1, 11, 19
INVALID_PARAMETER, ILLEGAL_OPERATION = 29, 604
HALF_TOPIC, TRANSACTION_GROUP = "RMQ_SYS_TRANS_HALF_TOPIC", "CID_SYS_RMQ_TRANS"
COMMIT, ROLLBACK = 8, 12
UNKNOW = LocalTransactionState.UNKNOW

TRANSPORTS = [("inproc", ["container"]), ("tcp", ["container"]), ("tcp", ["remote"])]


@pytest.fixture
def autojump() -> MockClock:
    """Mock time that jumps ahead when every task waits (over TCP too: a jump while a
    frame crosses the loopback moves time on to the next timer)."""
    return MockClock(autojump_threshold=0)


class Listener:
    """Leaves every local transaction unknown; a check answers ``check_answer``."""

    def __init__(self, check_answer: LocalTransactionState = UNKNOW) -> None:
        self.check_answer = check_answer
        self.checked: list[MessageExt] = []

    def execute_local_transaction(self, message: Message, arg: object
                                  ) -> LocalTransactionState:
        return UNKNOW

    def check_local_transaction(self, message: MessageExt) -> LocalTransactionState:
        self.checked.append(message)
        return self.check_answer


def halves(broker) -> list:
    return [r for r in broker.log.iter_records() if r.topic == HALF_TOPIC]


def end_fields(half, commit_or_rollback: int, **changes: str) -> dict[str, str]:
    """EndTransactionRequestHeader for the half message ``half`` (a stored record)."""
    fields = {"producerGroup": "tx-group", "tranStateTableOffset": str(half.queue_offset),
              "commitLogOffset": str(half.physical_offset),
              "commitOrRollback": str(commit_or_rollback), "fromTransactionCheck": "false",
              "msgId": half.properties["UNIQ_KEY"],
              "transactionId": half.properties["UNIQ_KEY"]}
    return {**fields, **changes}


async def pulled(client, address: str) -> list[bytes]:
    """The bodies of "orders" on ``address`` (both its queues), as a consumer pulls them."""
    bodies = []
    for queue in ("0", "1"):
        answer = await client.rpc.invoke(address, PULL_MESSAGE, {
            "consumerGroup": "cg", "topic": "orders", "queueId": queue, "queueOffset": "0",
            "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0",
            "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"})
        if answer.code != PULL_NOT_FOUND:
            assert answer.code == SUCCESS, answer.remark
            bodies += [m.body for m in decode_messages(answer.body)]
    return sorted(bodies)


class Setup:
    """a0, a1 and b0 running, topic "orders" on both masters and routed to both."""

    def __init__(self, cluster, groups: Groups, client, namesrv: str) -> None:
        self.cluster, self.groups, self.client, self.namesrv = cluster, groups, client, namesrv

    @property
    def a1_address(self) -> str:
        return self.cluster.node("a1").address

    async def create_topic(self, node: str, *, groups: int) -> None:
        """Create "orders" on ``node`` and wait until ``groups`` groups route it."""
        await create_topic(self.client, self.cluster.node(node).address, "orders")

        async def routed() -> bool:
            answer = await self.client.rpc.invoke(self.namesrv, GET_ROUTEINFO_BY_TOPIC,
                                                  {"topic": "orders"})
            return (answer.code == SUCCESS
                    and len(json.loads(answer.body)["brokerDatas"]) == groups)
        await wait_for(routed)

    async def end(self, fields: dict[str, str]):
        return await self.client.rpc.invoke(self.a1_address, END_TRANSACTION, fields)

    async def stop_master(self) -> int:
        """Stop a0 once a1 holds its log; a1's commit log end then."""
        master, slave = self.cluster.broker("a0"), self.cluster.broker("a1")
        await self.cluster.wait_for(
            lambda: slave.replicas.confirm_offset == master.log.max_offset)
        await self.cluster.kill("a0")
        await self.cluster.wait_for(lambda: slave.acting, timeout=30)
        return slave.log.max_offset


async def _setup(cluster, bridges: list[str], nodes: tuple[str, ...] = ("a0", "a1", "b0"),
                 **broker) -> Setup:
    acting_namesrv(cluster)
    (namesrv,) = cluster.namesrv_addresses.values()
    await cluster.start_namesrvs()
    groups = Groups(cluster, acting_escape_bridges=bridges,
                    enable_remote_escape="remote" in bridges, **broker)
    for name in nodes:
        await groups.start(name)
    client = await cluster.start("client")
    setup = Setup(cluster, groups, client, namesrv)
    await setup.create_topic("a0", groups=1)
    return setup


@pytest.mark.parametrize(("transport", "bridges"), TRANSPORTS)
async def test_the_acting_slave_ends_transactions_through_another_master(
        tmp_path, transport, bridges, autojump):
    async with open_cluster(tmp_path, transport=transport, controllers=0, brokers=0,
                            namesrvs=1) as cluster:
        # No check comes due during the test: the transactions end by END_TRANSACTION.
        setup = await _setup(cluster, bridges, transaction_time_out=600_000,
                             transaction_check_interval=500)
        app = cluster.node("client")
        producer = TransactionProducer("tx-group", [setup.namesrv],
                                       transaction_listener=Listener())
        async with producer.start(app.connect):
            for body in (b"paid", b"cancelled", b"open"):
                await producer.send_message_in_transaction(Message("orders", body))
        # Only group a took the halves; b takes the topic now, for the escapes.
        await setup.create_topic("b0", groups=2)
        slave = cluster.broker("a1")
        await cluster.wait_for(lambda: len(halves(slave)) == 3)
        paid, cancelled, still_open = halves(slave)
        assert paid.properties["REAL_TOPIC"] == "orders"

        # Not acting yet: a slave refuses, as RocketMQ's does.
        answer = await setup.end(end_fields(paid, COMMIT))
        assert answer.code == SLAVE_NOT_AVAILABLE, answer.remark

        held = await setup.stop_master()
        b0 = cluster.node("b0").address
        before = await pulled(setup.client, b0)

        # Bad headers: refused with the code naming the field, nothing put anywhere.
        cases = [
            (end_fields(paid, 5), INVALID_PARAMETER, "'commitOrRollback'"),
            (end_fields(paid, COMMIT, commitLogOffset="-1"), INVALID_PARAMETER,
             "'commitLogOffset'"),
            ({"producerGroup": "tx-group"}, INVALID_PARAMETER, "missing"),
            (end_fields(paid, COMMIT, producerGroup="other"), SYSTEM_ERROR,
             "The producer group wrong"),
            (end_fields(paid, COMMIT, tranStateTableOffset="7"), SYSTEM_ERROR,
             "The transaction state table offset wrong"),
            (end_fields(paid, COMMIT, commitLogOffset=str(held + 1)), SYSTEM_ERROR,
             "Find prepared transaction message failed"),
        ]
        for fields, code, remark in cases:
            answer = await setup.end(fields)
            assert (answer.code, remark in (answer.remark or "")) == (code, True), \
                (fields, answer.code, answer.remark)
        assert await pulled(setup.client, b0) == before

        # Commit: the real message is consumed from the other master.
        answer = await setup.end(end_fields(paid, COMMIT))
        assert answer.code == SUCCESS, answer.remark
        assert await pulled(setup.client, b0) == [*before, b"paid"]
        # Ended once.
        again = await setup.end(end_fields(paid, ROLLBACK))
        assert again.code == ILLEGAL_OPERATION and "already ended (commit)" in again.remark
        # Rollback: nothing is put.
        answer = await setup.end(end_fields(cancelled, ROLLBACK))
        assert answer.code == SUCCESS, answer.remark
        # The check's progress passes the ended ones and stops at the open one.
        await wait_for(_async(lambda: slave.offsets.table.query(
            TRANSACTION_GROUP, HALF_TOPIC, 0) == still_open.queue_offset))
        assert await pulled(setup.client, b0) == [*before, b"paid"]
        assert slave.log.max_offset == held


@pytest.mark.parametrize(("transport", "bridges"), TRANSPORTS)
async def test_an_open_half_is_escaped_and_the_other_masters_check_commits_it(
        tmp_path, transport, bridges, autojump):
    async with open_cluster(tmp_path, transport=transport, controllers=0, brokers=0,
                            namesrvs=1) as cluster:
        time_out = 60_000
        setup = await _setup(cluster, bridges, transaction_time_out=time_out,
                             transaction_check_interval=1000)
        # Until a0 stops, its half must not come due: time runs as the host's does there
        # (files written in threads, where the autojump would race ahead).
        autojump.autojump_threshold, autojump.rate = math.inf, 1.0
        app = cluster.node("client")
        listener = Listener(check_answer=LocalTransactionState.COMMIT_MESSAGE)
        # It learns the route again, and heartbeats its masters, every second.
        producer = TransactionProducer("tx-group", [setup.namesrv],
                                       transaction_listener=listener,
                                       heartbeat_broker_interval=1.0,
                                       poll_name_server_interval=1.0)
        async with producer.start(app.connect):
            sent = await producer.send_message_in_transaction(Message("orders", b"later"))
            assert sent.local_transaction_state is UNKNOW
            await setup.create_topic("b0", groups=2)
            slave, other = cluster.broker("a1"), cluster.broker("b0")
            await cluster.wait_for(lambda: len(halves(slave)) == 1)
            (half,) = halves(slave)
            held = await setup.stop_master()
            # Stopped before its time out: a0 never checked it (a check puts a copy).
            assert len(halves(slave)) == 1 and listener.checked == []
            autojump.autojump_threshold = 0

            # b0 holds it as its own half message, and its check asks the producer.
            await wait_for(_async(lambda: len(listener.checked) >= 1),
                           timeout=2 * time_out / 1000)
            escaped = halves(other)[0]
            assert escaped.properties["REAL_TOPIC"] == "orders"
            assert escaped.properties["PGROUP"] == "tx-group"
            assert escaped.properties["__transactionId__"] == half.properties["UNIQ_KEY"]
            assert escaped.born_timestamp == half.born_timestamp
            assert "TRAN_PREPARED_QUEUE_OFFSET" not in escaped.properties
            assert listener.checked[0].body == b"later"
            # The producer's answer committed it there.
            await wait_for(lambda_pulled(setup.client, cluster.node("b0").address, [b"later"]))
        # The acting check moved past it, and the slave no longer ends it itself.
        assert slave.offsets.table.query(TRANSACTION_GROUP, HALF_TOPIC, 0) == 1
        answer = await setup.end(end_fields(half, COMMIT))
        assert answer.code == ILLEGAL_OPERATION
        assert "moved to another master's check" in answer.remark
        await trio.sleep(2)
        assert await pulled(setup.client, cluster.node("b0").address) == [b"later"]
        assert slave.log.max_offset == held


@pytest.mark.parametrize(("transport", "bridges"), [("inproc", ["container"]),
                                                    ("tcp", ["remote"])])
async def test_an_escape_that_finds_no_master_is_retried_next_round(
        tmp_path, transport, bridges, autojump, caplog):
    async with open_cluster(tmp_path, transport=transport, controllers=0, brokers=0,
                            namesrvs=1) as cluster:
        interval, time_out = 500, 60_000
        setup = await _setup(cluster, bridges, nodes=("a0", "a1"),
                             transaction_time_out=time_out, transaction_check_interval=interval)
        # Until a0 stops, its half must not come due (see above).
        autojump.autojump_threshold, autojump.rate = math.inf, 1.0
        producer = TransactionProducer("tx-group", [setup.namesrv],
                                       transaction_listener=Listener())
        async with producer.start(cluster.node("client").connect):
            await producer.send_message_in_transaction(Message("orders", b"later"))
        slave = cluster.broker("a1")
        await cluster.wait_for(lambda: len(halves(slave)) >= 1)
        held = await setup.stop_master()
        (half,) = halves(slave)
        autojump.autojump_threshold = 0
        # Due, and several rounds later no master took it: the progress stays.
        await slave.clock.sleep_until(half.born_timestamp + time_out + 4 * interval)
        assert slave.offsets.table.query(TRANSACTION_GROUP, HALF_TOPIC, 0) in (None, 0)
        stopped = [r for r in caplog.records if "acting transaction check stopped at half "
                   "message 0, retried next round" in r.getMessage()]
        assert len(stopped) >= 2
        # A master of another group comes: the next round escapes the half to it.
        await setup.groups.start("b0")
        await setup.create_topic("b0", groups=2)
        other = cluster.broker("b0")
        await cluster.wait_for(lambda: len(halves(other)) >= 1, timeout=30)
        assert halves(other)[0].properties["__transactionId__"] == half.properties["UNIQ_KEY"]
        await wait_for(_async(lambda: slave.offsets.table.query(
            TRANSACTION_GROUP, HALF_TOPIC, 0) == 1))
        assert slave.log.max_offset == held


async def test_a_returning_master_does_not_check_what_its_acting_slave_ended(
        tmp_path, autojump):
    async with open_cluster(tmp_path, transport="inproc", controllers=0, brokers=0,
                            namesrvs=1) as cluster:
        interval, time_out = 500, 60_000
        # Every commit of an offset is a new DataVersion: the pre-online takes them back.
        setup = await _setup(cluster, ["container"], transaction_time_out=time_out,
                             transaction_check_interval=interval,
                             consumer_offset_update_version_step=1,
                             slave_synchronize_period=100)
        producer = TransactionProducer("tx-group", [setup.namesrv],
                                       transaction_listener=Listener())
        async with producer.start(cluster.node("client").connect):
            await producer.send_message_in_transaction(Message("orders", b"paid"))
        await setup.create_topic("b0", groups=2)
        slave = cluster.broker("a1")
        await cluster.wait_for(lambda: len(halves(slave)) == 1)
        (half,) = halves(slave)
        # The half must still be young when it is ended: across the stop (files closed in
        # threads, where the autojump would race ahead) time runs as the host's does.
        autojump.autojump_threshold, autojump.rate = math.inf, 1.0
        await setup.stop_master()
        answer = await setup.end(end_fields(half, COMMIT))
        assert answer.code == SUCCESS, answer.remark
        autojump.autojump_threshold = 0
        await wait_for(_async(lambda: slave.offsets.table.query(
            TRANSACTION_GROUP, HALF_TOPIC, 0) == 1))

        await setup.groups.start("a0")
        master = cluster.broker("a0")
        await cluster.wait_for(lambda: not slave.acting and not master.isolated, timeout=30)
        assert master.offsets.table.query(TRANSACTION_GROUP, HALF_TOPIC, 0) == 1
        # Rounds well past its time out: the master puts no check copy of it.
        await master.clock.sleep_until(half.born_timestamp + time_out + 4 * interval)
        assert len(halves(master)) == 1
        assert await pulled(setup.client, cluster.node("b0").address) == [b"paid"]


def _async(predicate):
    async def holds() -> bool:
        return predicate()
    return holds


def lambda_pulled(client, address: str, expected: list[bytes]):
    async def holds() -> bool:
        return await pulled(client, address) == expected
    return holds
