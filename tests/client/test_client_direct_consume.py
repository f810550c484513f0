"""A push consumer's answer to CONSUME_MESSAGE_DIRECTLY (mqadmin queryMsgById -g -d), via a broker.

The expected bodies are fastjson's ``ConsumeMessageDirectlyResult`` as RocketMQ
5.3.3's Java consumer writes it (fields in name order, nulls left out),
written out here by hand.
"""

from __future__ import annotations

import trio
from client_cluster import open_groups
from test_client_push_consumer import FAST, until

from triomq.client.core.listener import (
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyStatus,
    MessageListenerConcurrently,
    MessageListenerOrderly,
)
from triomq.client.core.message import Message, MessageExt
from triomq.client.direct_consume import CMResult, DirectResult, exception_desc
from triomq.client.lite_pull_consumer import LitePullConsumer
from triomq.client.producer import Producer
from triomq.client.push_consumer import PushConsumer
from triomq.protocol.remoting import RemotingCommand

CONSUME_MESSAGE_DIRECTLY, SUCCESS, SYSTEM_ERROR = 309, 0, 1


def test_the_body_is_fastjsons_consume_message_directly_result() -> None:
    assert DirectResult(False, CMResult.CR_SUCCESS, 3).to_json() == (
        b'{"autoCommit":true,"consumeResult":"CR_SUCCESS","order":false,"spentTimeMills":3}')
    assert DirectResult(True, CMResult.CR_THROW_EXCEPTION, 0,
                        remark='ValueError: "x", f(a.py:1)').to_json() == (
        b'{"autoCommit":true,"consumeResult":"CR_THROW_EXCEPTION","order":true,'
        b'"remark":"ValueError: \\"x\\", f(a.py:1)","spentTimeMills":0}')
    # A listener's answer that is no status: the Java client leaves the result null.
    assert DirectResult(False, None, 12, auto_commit=False).to_json() == (
        b'{"autoCommit":false,"order":false,"spentTimeMills":12}')


def test_an_exception_is_described_as_rocketmqs_exception_simple_desc() -> None:
    def fail() -> None:
        raise ValueError("bad body")

    try:
        fail()
    except ValueError as exc:
        line = exc.__traceback__.tb_next.tb_lineno  # type: ignore[union-attr]
        assert exception_desc(exc) == (
            f"ValueError: bad body, fail(test_client_direct_consume.py:{line})")
    assert exception_desc(trio.TooSlowError()) == "trio.TooSlowError"


async def test_a_broker_has_the_push_consumer_consume_a_stored_message(
        tmp_path, autojump_clock) -> None:
    async with open_groups(tmp_path) as groups:
        await groups.create_topic("orders", queues=1)
        app = await groups.client()
        admin = groups.cluster.node("admin")
        broker = groups.cluster.node("a").address
        seen: list[MessageExt] = []
        answers: list[object] = [ConsumeConcurrentlyStatus.CONSUME_SUCCESS]

        async def concurrently(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
            seen.extend(messages)
            await trio.sleep(0.25)
            answer = answers[0]
            if isinstance(answer, Exception):
                raise answer
            return answer  # type: ignore[return-value]

        async def orderly(messages: list[MessageExt]) -> ConsumeOrderlyStatus:
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT

        push = PushConsumer("cg", groups.namesrv, instance_name="one", **FAST)
        push.subscribe("orders")
        push.register_message_listener(MessageListenerConcurrently(concurrently))
        ordered = PushConsumer("og", groups.namesrv, instance_name="two", **FAST)
        ordered.subscribe("orders")
        ordered.register_message_listener(MessageListenerOrderly(orderly))
        lite = LitePullConsumer("lite", groups.namesrv, instance_name="three",
                                rebalance_interval=0.5)
        lite.subscribe("orders")
        async with push.start(app.connect), ordered.start(app.connect), lite.start(app.connect):
            async with Producer("pg", groups.namesrv).start(app.connect) as producer:
                sent = await producer.send(Message("orders", b"paid", tags="t"))
            await until(lambda: len(seen) == 1)
            await trio.sleep(1)  # consumed and its offset committed
            (queue,) = (q for q in push.states if q.topic == "orders")
            committed = push.offsets.read(queue)
            assert committed == 1

            async def directly(group: str, client_id: str) -> RemotingCommand:
                return await admin.rpc.invoke(broker, CONSUME_MESSAGE_DIRECTLY, {
                    "consumerGroup": group, "clientId": client_id,
                    "msgId": sent.offset_msg_id, "topic": "orders"})

            answer = await directly("cg", push.client_id)
            assert (answer.code, answer.body) == (SUCCESS, b'{"autoCommit":true,'
                                                  b'"consumeResult":"CR_SUCCESS","order":false,'
                                                  b'"spentTimeMills":250}')
            # The listener had the stored message, named by the broker's name; no offset moved.
            again = seen[-1]
            assert len(seen) == 2 and again.body == b"paid" and again.tags == "t"
            assert (again.msg_id, again.offset_msg_id, again.broker_name, again.queue_offset) == (
                sent.msg_id, sent.offset_msg_id, "broker-a", 0)
            assert push.offsets.read(queue) == committed

            answers[0] = ConsumeConcurrentlyStatus.RECONSUME_LATER
            answer = await directly("cg", push.client_id)
            assert b'"consumeResult":"CR_LATER"' in answer.body
            answers[0] = None
            answer = await directly("cg", push.client_id)
            assert b'"consumeResult":"CR_RETURN_NULL"' in answer.body
            answers[0] = RuntimeError("boom")
            answer = await directly("cg", push.client_id)
            assert answer.code == SUCCESS
            assert answer.body.startswith(b'{"autoCommit":true,"consumeResult":'
                                          b'"CR_THROW_EXCEPTION","order":false,"remark":'
                                          b'"RuntimeError: boom, concurrently(test_client_')
            assert answer.body.endswith(b'"spentTimeMills":250}')
            assert push.offsets.read(queue) == committed

            answer = await directly("og", ordered.client_id)
            assert (answer.code, answer.body) == (SUCCESS, b'{"autoCommit":true,'
                                                  b'"consumeResult":"CR_LATER","order":true,'
                                                  b'"spentTimeMills":0}')
            # A lite pull consumer is no push consumer: it answers as a Java one does.
            answer = await directly("lite", lite.client_id)
            assert (answer.code, answer.remark) == (
                SYSTEM_ERROR, "The Consumer Group <lite> not exist in this consumer")
            # So does a push consumer asked about another group.
            connection = await admin.rpc.connection(broker)
            answer = await push._on_consume_directly(RemotingCommand.request(
                CONSUME_MESSAGE_DIRECTLY, {"consumerGroup": "other"}), connection)
            assert (answer.code, answer.remark) == (
                SYSTEM_ERROR, "The Consumer Group <other> not exist in this consumer")
