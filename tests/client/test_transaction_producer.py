"""Transactional messages through triomq.client: commit, rollback, checks and discards;
the checks over inproc and TCP under trio's ``MockClock``: an unknown transaction is
checked back once transaction_time_out has passed (within one check interval after),
then ended as the producer's checker says."""

from __future__ import annotations

import itertools

import pytest
import trio
from client_cluster import open_groups, start_replicated_topic

from triomq.broker.secondary.core.transaction import (
    CHECK_MAX_TIME_TOPIC,
    HALF_TOPIC,
    OP_HALF_TOPIC,
    TRANSACTION_GROUP,
)
from triomq.broker.service import broker_of
from triomq.client import (
    LocalTransactionState,
    Message,
    MessageExt,
    MessageQueue,
    TransactionProducer,
)
from triomq.client.core.consume_from import ConsumeFromWhere
from triomq.client.core.errors import NoRouteError
from triomq.client.lite_pull_consumer import LitePullConsumer
from triomq.testing.cluster import open_cluster

COMMIT = LocalTransactionState.COMMIT_MESSAGE
ROLLBACK = LocalTransactionState.ROLLBACK_MESSAGE
UNKNOW = LocalTransactionState.UNKNOW
QUEUE = MessageQueue("orders", "broker-a", 0)
#: Checks every 100 ms of half messages older than 1 ms.
QUICK_CHECKS = {"transaction_check_interval": 100, "transaction_time_out": 1}
#: Checks every second of half messages older than 3 s (under the mock clock).
INTERVAL, TIME_OUT = 1000, 3000
CHECKS = {"transaction_check_interval": INTERVAL, "transaction_time_out": TIME_OUT}


class Listener:
    """Executes by the body's word; checks answer ``check_answer``."""

    def __init__(self, check_answer: LocalTransactionState = UNKNOW) -> None:
        self.check_answer = check_answer
        self.executed: list[bytes] = []
        self.checked: list[MessageExt] = []

    async def execute_local_transaction(self, message: Message, arg: object
                                        ) -> LocalTransactionState:
        self.executed.append(message.body)
        await trio.lowlevel.checkpoint()
        return {b"commit": COMMIT, b"rollback": ROLLBACK}.get(message.body, UNKNOW)

    def check_local_transaction(self, message: MessageExt) -> LocalTransactionState:
        self.checked.append(message)
        return self.check_answer


async def wait_for(predicate, timeout: float = 20.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.01)


async def consumed(groups, wanted: int) -> list[MessageExt]:
    """Every message of queue 0 of "orders" once ``wanted`` are there (then one more poll)."""
    app = groups.cluster.node("app")
    consumer = LitePullConsumer("reader", groups.namesrv, pull_delay_on_exception=0.1,
                                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.assign([QUEUE])
    got: list[MessageExt] = []
    async with consumer.start(app.connect):
        with trio.fail_after(20):
            while len(got) < wanted:
                got += await consumer.poll(timeout=0.5)
        got += await consumer.poll(timeout=0.3)
    return got


def queue_size(groups, topic: str) -> int:
    return broker_of(groups.cluster.node("a")).log.queue_max_offset(topic, 0)


@pytest.mark.parametrize("transport", ["inproc", "tcp"])
async def test_a_committed_transaction_is_consumed_once_a_rolled_back_one_never(
        tmp_path, transport) -> None:
    async with open_groups(tmp_path, transport) as groups:
        await groups.create_topic("orders", queues=1)
        app = await groups.client("app")
        listener = Listener()
        producer = TransactionProducer("tx", groups.namesrv, transaction_listener=listener)
        async with producer.start(app.connect):
            rolled = await producer.send_message_in_transaction(
                Message("orders", b"rollback", keys="o-1"))
            committed = await producer.send_message_in_transaction(
                Message("orders", b"commit", keys="o-2"), arg="order 2")
        assert rolled.local_transaction_state is ROLLBACK
        assert committed.local_transaction_state is COMMIT
        assert listener.executed == [b"rollback", b"commit"]
        # Both half messages were stored in the half queue, and both ended.
        assert [rolled.send_result.queue_offset, committed.send_result.queue_offset] == [0, 1]
        await wait_for(lambda: queue_size(groups, OP_HALF_TOPIC) == 2)
        got = await consumed(groups, 1)
        assert [m.body for m in got] == [b"commit"]
        message = got[0]
        assert message.msg_id == committed.transaction_id == committed.send_result.msg_id
        assert message.keys == ("o-2",)
        assert message.properties["PGROUP"] == "tx"
        # RocketMQ 5 clears the half message's marks on the committed one.
        assert not {"TRAN_MSG", "REAL_TOPIC", "REAL_QID"} & message.properties.keys()
        assert message.sys_flag & 0xC == 8  # TRANSACTION_COMMIT_TYPE
        assert queue_size(groups, HALF_TOPIC) == 2
        assert listener.checked == []


def check_copies(broker) -> list:
    """The half message's copies the checks put, each at its check's round."""
    return [r for r in broker.log.iter_records()
            if r.topic == HALF_TOPIC and "TRANSACTION_CHECK_TIMES" in r.properties]


async def test_an_unknown_transaction_is_checked_then_ended_by_the_checker(
        tmp_path, transport, autojump) -> None:
    async with open_groups(tmp_path, transport, **CHECKS) as groups:
        await groups.create_topic("orders", queues=1)
        app = await groups.client("app")
        broker = broker_of(groups.cluster.node("a"))
        listener = Listener(check_answer=COMMIT)
        producer = TransactionProducer("tx", groups.namesrv, transaction_listener=listener)
        async with producer.start(app.connect):
            result = await producer.send_message_in_transaction(Message("orders", b"later"))
            assert result.local_transaction_state is UNKNOW
            (half,) = [r for r in broker.log.iter_records() if r.topic == HALF_TOPIC]
            # Not checked before its time out.
            await broker.clock.sleep_until(half.born_timestamp + TIME_OUT - 1)
            assert listener.checked == [] and check_copies(broker) == []
            await wait_for(lambda: listener.checked, timeout=60)
            got = await consumed(groups, 1)
        assert [m.body for m in got] == [b"later"]
        # Checked in the first round after its time out (measured by the broker's clock:
        # the copy the check put, stored at its round).
        (copy,) = check_copies(broker)
        checked_at = half.born_timestamp + TIME_OUT
        assert checked_at <= copy.store_timestamp <= checked_at + INTERVAL
        assert got[0].store_timestamp >= copy.store_timestamp
        checked = listener.checked[0]
        # The check carries the message in its real topic, the producer's id kept.
        assert (checked.topic, checked.queue_id, checked.body) == ("orders", 0, b"later")
        assert checked.msg_id == result.transaction_id
        assert checked.properties["TRANSACTION_CHECK_TIMES"] == "1"
        assert broker.transactions is not None and broker.transactions.checks_sent == 1


async def test_a_transaction_still_unknown_after_the_max_checks_is_discarded(
        tmp_path, transport, autojump) -> None:
    async with open_groups(tmp_path, transport, transaction_check_max=3, **CHECKS) as groups:
        await groups.create_topic("orders", queues=1)
        app = await groups.client("app")
        listener = Listener(check_answer=UNKNOW)
        producer = TransactionProducer("tx", groups.namesrv, transaction_listener=listener)
        async with producer.start(app.connect):
            await producer.send_message_in_transaction(Message("orders", b"never"))
            await wait_for(lambda: queue_size(groups, CHECK_MAX_TIME_TOPIC) == 1, timeout=60)
            await wait_for(lambda: len(listener.checked) == 3)
        assert [m.properties["TRANSACTION_CHECK_TIMES"] for m in listener.checked] == \
            ["1", "2", "3"]
        broker = broker_of(groups.cluster.node("a"))
        # One check a round once it timed out, then the discard the round after.
        discarded = [r for r in broker.log.iter_records() if r.topic == CHECK_MAX_TIME_TOPIC]
        assert [r.body for r in discarded] == [b"never"]
        assert discarded[0].properties["REAL_TOPIC"] == "orders"
        rounds = [r.store_timestamp for r in [*check_copies(broker), *discarded]]
        assert all(INTERVAL <= b - a < 2 * INTERVAL for a, b in itertools.pairwise(rounds))
        # The check's progress is group CID_SYS_RMQ_TRANS's offset, past every half message.
        await wait_for(lambda: broker.offsets.table.query(TRANSACTION_GROUP, HALF_TOPIC, 0)
                       == broker.log.queue_max_offset(HALF_TOPIC, 0))
        assert queue_size(groups, "orders") == 0


async def test_a_new_master_checks_an_open_transaction_and_commits_it_once(tmp_path) -> None:
    broker = {"all_ack_in_sync_state_set": True, **QUICK_CHECKS}
    async with open_cluster(tmp_path, namesrvs=1, broker=broker) as cluster:
        app, master = await start_replicated_topic(cluster, "orders", app="client", queues=1)
        listener = Listener(check_answer=UNKNOW)
        producer = TransactionProducer("tx", list(cluster.namesrv_addresses.values()),
                                       transaction_listener=listener,
                                       poll_name_server_interval=0.2,
                                       heartbeat_broker_interval=0.2)
        async with producer.start(app.connect):
            with trio.fail_after(20):
                while True:
                    try:
                        result = await producer.send_message_in_transaction(
                            Message("orders", b"across"))
                        break
                    except NoRouteError:  # the master has not registered the topic yet
                        await trio.sleep(0.05)
            await wait_for(lambda: listener.checked)  # the old master checked it
            epoch = cluster.broker(master).replicas.master_epoch
            await cluster.kill(master)
            new_master = await cluster.wait_master(epoch_above=epoch)
            listener.check_answer = COMMIT
            log = cluster.broker(new_master).log

            def committed() -> list:
                return [r for r in log.iter_records() if r.topic == "orders"]

            await wait_for(lambda: committed(), timeout=30)
            # Once the new master's check has passed every copy, nothing is left open.
            offsets = cluster.broker(new_master).offsets
            assert offsets is not None
            await wait_for(lambda: offsets.table.query(TRANSACTION_GROUP, HALF_TOPIC, 0)
                           == log.queue_max_offset(HALF_TOPIC, 0), timeout=30)
        assert [r.body for r in committed()] == [b"across"]
        assert committed()[0].properties["UNIQ_KEY"] == result.transaction_id
