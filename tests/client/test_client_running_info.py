"""A consumer's answer to GET_CONSUMER_RUNNING_INFO (mqadmin consumerStatus), via a broker.

The body's expected bytes are fastjson's ``ConsumerRunningInfo`` as RocketMQ
5.3.3's Java consumer writes it (its beans' fields in name order, the
``mqTable`` keyed by ``MessageQueue`` objects), written out here by hand.
"""

from __future__ import annotations

import json

import trio
from client_cluster import open_groups
from test_client_process_queue import msg
from test_client_push_consumer import FAST, Recorder, produce, until

from triomq.client.core.message import MessageQueue
from triomq.client.core.process_queue import ProcessQueue
from triomq.client.core.running_info import process_queue_info, running_info_body
from triomq.client.lite_pull_consumer import LitePullConsumer
from triomq.client.push_consumer import PushConsumer
from triomq.protocol.heartbeat import SubscriptionData
from triomq.protocol.remoting import RemotingCommand

GET_CONSUMER_RUNNING_INFO, SUCCESS, SYSTEM_ERROR = 307, 0, 1


def test_the_body_is_fastjsons_consumer_running_info() -> None:
    process = ProcessQueue()
    process.put([msg(o, b"x" * 10) for o in (7, 8, 9)])
    process.take()  # orderly: 7 is being consumed
    # Locked, pulled and consumed 5, 2 and 1 s before now (trio's clock at 100).
    info = process_queue_info(process, commit_offset=None, locked=True,
                              moments=(95.0, 98.0, 99.0), now=100.0,
                              wall_ms=1_700_000_010_000)
    queue = MessageQueue("orders", "broker-a", 1)
    body = running_info_body(
        properties={"consumerGroup": "cg", "PROP_CONSUME_TYPE": "CONSUME_PASSIVELY"},
        subscriptions=[SubscriptionData.build("orders", "paid || new", 5),
                       SubscriptionData.build("%RETRY%cg", "*", 6)],
        queues={queue: info})
    assert body == (
        b'{"mqPopTable":{},"mqTable":{{"brokerName":"broker-a","queueId":1,"topic":"orders"}:'
        b'{"cachedMsgCount":2,"cachedMsgMaxOffset":9,"cachedMsgMinOffset":8,'
        b'"cachedMsgSizeInMiB":0,"commitOffset":7,"droped":false,'
        b'"lastConsumeTimestamp":1700000009000,"lastLockTimestamp":1700000005000,'
        b'"lastPullTimestamp":1700000008000,"locked":true,"transactionMsgCount":1,'
        b'"transactionMsgMaxOffset":7,"transactionMsgMinOffset":7,"tryUnlockTimes":0}},'
        b'"properties":{"PROP_CONSUME_TYPE":"CONSUME_PASSIVELY","consumerGroup":"cg"},'
        b'"statusTable":{"%RETRY%cg":{"consumeFailedMsgs":0,"consumeFailedTPS":0.0,'
        b'"consumeOKTPS":0.0,"consumeRT":0.0,"pullRT":0.0,"pullTPS":0.0},'
        b'"orders":{"consumeFailedMsgs":0,"consumeFailedTPS":0.0,"consumeOKTPS":0.0,'
        b'"consumeRT":0.0,"pullRT":0.0,"pullTPS":0.0}},'
        b'"subscriptionSet":[{"classFilterMode":false,"codeSet":[],"expressionType":"TAG",'
        b'"subString":"*","subVersion":6,"tagsSet":[],"topic":"%RETRY%cg"},'
        b'{"classFilterMode":false,"codeSet":[108960,3433164],"expressionType":"TAG",'
        b'"subString":"paid || new","subVersion":5,"tagsSet":["new","paid"],'
        b'"topic":"orders"}],"userConsumerInfo":{}}')
    # A queue that never held a message commits nothing yet.
    assert process_queue_info(ProcessQueue(), commit_offset=None, locked=False,
                              moments=(0.0, 0.0, 0.0), now=0.0, wall_ms=0).commit_offset == -1


def section(body: bytes, key: str) -> object:
    """The JSON value after ``"key":`` in the body (whose ``mqTable`` is not JSON)."""
    text = body.decode()
    start = text.index(f'"{key}":') + len(key) + 3
    return json.JSONDecoder().raw_decode(text, start)[0]


async def test_a_broker_passes_the_question_on_to_the_consumer(tmp_path, autojump_clock) -> None:
    async with open_groups(tmp_path) as groups:
        await groups.create_topic("orders", queues=2)
        app = await groups.client()
        admin = groups.cluster.node("admin")
        broker = groups.cluster.node("a").address
        await produce(groups, "orders", 4)
        recorder = Recorder()
        push = PushConsumer("cg", groups.namesrv, instance_name="one", **FAST)
        push.subscribe("orders", "t0 || t1")
        push.register_message_listener(recorder.concurrently("one"))
        lite = LitePullConsumer("lite", groups.namesrv, instance_name="two",
                                rebalance_interval=0.5)
        lite.subscribe("orders")
        async with push.start(app.connect), lite.start(app.connect):
            await until(lambda: len(recorder.bodies()) == 4 and len(lite.assignment) == 2)
            await trio.sleep(1)  # the offsets are committed in memory by now
            answer = await admin.rpc.invoke(broker, GET_CONSUMER_RUNNING_INFO, {
                "consumerGroup": "cg", "clientId": push.client_id, "jstackEnable": "false"})
            assert answer.code == SUCCESS, answer.remark
            body = answer.body
            assert body.startswith(b'{"mqPopTable":{},"mqTable":{{"brokerName":"broker-a",')
            assert (b'{"brokerName":"broker-a","queueId":0,"topic":"orders"}:'
                    b'{"cachedMsgCount":0,') in body
            properties = section(body, "properties")
            assert isinstance(properties, dict)
            assert {k: properties[k] for k in (
                "PROP_CONSUME_TYPE", "PROP_CONSUMEORDERLY", "PROP_CLIENT_VERSION",
                "PROP_THREADPOOL_CORE_SIZE", "PROP_NAMESERVER_ADDR", "consumerGroup")} == {
                "PROP_CONSUME_TYPE": "CONSUME_PASSIVELY", "PROP_CONSUMEORDERLY": "false",
                "PROP_CLIENT_VERSION": "V5_3_3", "PROP_THREADPOOL_CORE_SIZE": "20",
                "PROP_NAMESERVER_ADDR": "".join(f"{a};" for a in groups.namesrv),
                "consumerGroup": "cg"}
            assert int(properties["PROP_CONSUMER_START_TIMESTAMP"]) > 1_600_000_000_000
            # The group's retry topic too, as a RocketMQ push consumer subscribes to it.
            assert sorted((s["topic"], s["subString"]) for s in section(
                body, "subscriptionSet")) == [("%RETRY%cg", "*"), ("orders", "t0 || t1")]
            assert set(section(body, "statusTable")) == {"orders", "%RETRY%cg"}
            # Both queues' offsets committed past their two messages each.
            assert body.count(b'"commitOffset":2,') == 2

            answer = await admin.rpc.invoke(broker, GET_CONSUMER_RUNNING_INFO, {
                "consumerGroup": "lite", "clientId": lite.client_id})
            assert answer.code == SUCCESS, answer.remark
            properties = section(answer.body, "properties")
            assert isinstance(properties, dict)
            assert properties["PROP_CONSUME_TYPE"] == "CONSUME_ACTIVELY"
            assert "PROP_CONSUMEORDERLY" not in properties

            # The broker asks a client only in the group it names.
            answer = await admin.rpc.invoke(broker, GET_CONSUMER_RUNNING_INFO, {
                "consumerGroup": "cg", "clientId": lite.client_id})
            assert (answer.code, answer.remark) == (
                SYSTEM_ERROR, f"The Consumer <cg> <{lite.client_id}> not online")
            # A consumer asked about another group says so, as RocketMQ's does.
            connection = await admin.rpc.connection(broker)
            answer = await push._on_running_info(RemotingCommand.request(
                GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "other"}), connection)
            assert (answer.code, answer.remark) == (
                SYSTEM_ERROR, "The Consumer Group <other> not exist in this consumer")
