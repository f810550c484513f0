"""One send's flow without an event loop: results, refusals, retries, and riding
through a failover within the send timeout."""

from __future__ import annotations

from triomq.client.core.errors import BrokerError, NoRouteError
from triomq.client.core.failover_pause import FIRST_PAUSE, LONGEST_PAUSE
from triomq.client.core.message import MessageQueue, SendStatus
from triomq.client.core.publish import QueueSelector, TopicPublishInfo
from triomq.client.core.send_flow import (
    FetchRoute,
    SendAttempt,
    SendFailed,
    SendFlow,
    Sent,
    WaitForRetry,
)
from triomq.protocol.remoting import RemotingCommand
from triomq.rpc import RpcConnectionError, RpcTimeout

TOPIC = "orders"
SUCCESS, SYSTEM_ERROR, SYSTEM_BUSY, MESSAGE_ILLEGAL = 0, 1, 2, 13
SERVICE_NOT_AVAILABLE, FLUSH_SLAVE_TIMEOUT = 14, 12


def info(masters: dict[str, str], queues: int = 2) -> TopicPublishInfo:
    return TopicPublishInfo(
        tuple(MessageQueue(TOPIC, g, i) for g in sorted(masters) for i in range(queues)),
        masters)


NO_MASTER = TopicPublishInfo((), {})
A1 = info({"broker-a": "tcp://a1:10911"})
A2 = info({"broker-a": "tcp://a2:10911"})
AB = info({"broker-a": "tcp://a1:10911", "broker-b": "tcp://b1:10911"})


def flow(publish: TopicPublishInfo | None = A1, *, timeout: float = 3.0, retries: int = 2,
         queue: MessageQueue | None = None) -> SendFlow:
    return SendFlow(TOPIC, "ID1", publish, QueueSelector(), now=0.0, send_msg_timeout=timeout,
                    retry_times_when_send_failed=retries, queue=queue)


def answer(code: int, remark: str | None = None, **fields: str) -> RemotingCommand:
    return RemotingCommand.response(code, remark=remark, ext_fields=fields)


def test_a_stored_answer_is_the_result_whatever_its_status() -> None:
    f = flow()
    attempt = f.start(0.0)
    assert isinstance(attempt, SendAttempt) and attempt.address == "tcp://a1:10911"
    assert attempt.timeout == 3.0
    done = f.answered(attempt.address, answer(SUCCESS, msgId="OFF", queueId="1",
                                              queueOffset="7"), 0.01)
    assert isinstance(done, Sent)
    assert done.result.send_status is SendStatus.SEND_OK
    assert (done.result.msg_id, done.result.offset_msg_id) == ("ID1", "OFF")
    assert done.result.message_queue == MessageQueue(TOPIC, "broker-a", 1)
    assert done.result.queue_offset == 7
    f = flow()
    attempt = f.start(0.0)
    done = f.answered(attempt.address, answer(FLUSH_SLAVE_TIMEOUT), 2.0)
    assert isinstance(done, Sent)
    assert done.result.send_status is SendStatus.FLUSH_SLAVE_TIMEOUT


def test_a_refusal_rocketmq_does_not_retry_fails_at_once_with_its_remark() -> None:
    f = flow()
    attempt = f.start(0.0)
    done = f.answered(attempt.address, answer(MESSAGE_ILLEGAL, "body too long"), 0.01)
    assert isinstance(done, SendFailed) and isinstance(done.error, BrokerError)
    assert done.error.code == MESSAGE_ILLEGAL and "body too long" in str(done.error)


def test_a_busy_broker_is_retried_on_another_group_a_bounded_number_of_times() -> None:
    f = flow(AB, retries=2)
    first = f.start(0.0)
    assert isinstance(first, SendAttempt)
    second = f.answered(first.address, answer(SYSTEM_BUSY, "too many requests"), 0.01)
    assert isinstance(second, SendAttempt)
    assert second.queue.broker_name != first.queue.broker_name
    third = f.answered(second.address, answer(SYSTEM_ERROR, "disk"), 0.02)
    assert isinstance(third, SendAttempt)
    done = f.answered(third.address, answer(SYSTEM_BUSY, "still busy"), 0.03)
    assert isinstance(done, SendFailed) and done.error.code == SYSTEM_BUSY  # type: ignore[attr-defined]


def test_a_master_killed_mid_send_is_waited_out_until_the_new_master_is_routed() -> None:
    """No answer from the old master; routes that name it, then none; then the new
    master. The send goes there, within its timeout, and never fails sooner."""
    f = flow(A1)
    attempt = f.start(0.0)
    action = f.unanswered(RpcConnectionError("tcp://a1:10911: connection refused"), 0.001)
    assert action == FetchRoute()  # at once: the route may already name the new master
    action = f.routed(A1, 0.002)  # still the dead master: pause before trying it again
    assert action == WaitForRetry(0.002 + FIRST_PAUSE)
    now = action.until
    assert f.timer(now) == FetchRoute()
    attempt = f.routed(A1, now)  # unchanged after the pause: tried again
    assert isinstance(attempt, SendAttempt) and attempt.address == "tcp://a1:10911"
    assert attempt.timeout == 3.0 - now
    action = f.unanswered(RpcConnectionError("tcp://a1:10911: connection refused"), now)
    assert action == FetchRoute()
    pauses = []
    action = f.routed(NO_MASTER, now)  # the controller has not elected yet
    while isinstance(action, WaitForRetry):
        pauses.append(action.until - now)
        now = action.until
        assert f.timer(now) == FetchRoute()
        action = f.routed(NO_MASTER if now < 0.7 else A2, now)
    assert pauses == sorted(pauses) and max(pauses) <= LONGEST_PAUSE + 1e-9
    assert isinstance(action, SendAttempt) and action.address == "tcp://a2:10911"
    done = f.answered(action.address, answer(SUCCESS, msgId="OFF", queueOffset="0"), now)
    assert isinstance(done, Sent) and 0.7 <= now < 3.0


def test_a_master_that_stepped_down_sends_to_the_new_one_once_routed() -> None:
    f = flow(A1)
    attempt = f.start(0.0)
    action = f.answered(attempt.address,
                        answer(SERVICE_NOT_AVAILABLE, "the broker is no longer master"), 0.01)
    assert action == FetchRoute()
    retry = f.routed(A2, 0.02)  # a new master is routed: tried at once
    assert isinstance(retry, SendAttempt) and retry.address == "tcp://a2:10911"


def test_a_dead_group_is_left_for_the_other_at_once() -> None:
    f = flow(AB)
    first = f.start(0.0)
    assert isinstance(first, SendAttempt)
    assert f.unanswered(RpcConnectionError("refused"), 0.01) == FetchRoute()
    second = f.routed(AB, 0.01)
    assert isinstance(second, SendAttempt)
    assert second.queue.broker_name != first.queue.broker_name


def test_a_send_that_finds_no_master_fails_after_its_timeout_with_the_last_reason() -> None:
    f = flow(A1, timeout=3.0)
    f.start(0.0)
    refused = RpcConnectionError("tcp://a1:10911: connection refused")
    action = f.unanswered(refused, 0.0)
    now = 0.0
    while not isinstance(action, SendFailed):
        if isinstance(action, FetchRoute):
            action = f.routed(NO_MASTER, now)
        else:
            assert isinstance(action, WaitForRetry) and action.until <= 3.0
            now = action.until
            action = f.timer(now)
    assert action.error is refused
    assert now == 3.0  # it gave up at its deadline, not sooner


def test_a_send_with_no_master_ever_fails_with_no_route_naming_the_timeout() -> None:
    f = flow(None, timeout=1.0)
    action = f.start(0.0)
    now = 0.0
    while not isinstance(action, SendFailed):
        if isinstance(action, FetchRoute):
            action = f.routed(NO_MASTER, now)
        else:
            now = action.until  # type: ignore[union-attr]
            action = f.timer(now)
    assert isinstance(action.error, NoRouteError) and now == 1.0
    assert "1 s" in str(action.error) and "send_msg_timeout" in str(action.error)


def test_an_unanswered_name_server_is_asked_again_an_unknown_topic_fails_at_once() -> None:
    f = flow(None)
    assert f.start(0.0) == FetchRoute()
    wait = f.not_routed(RpcTimeout("no name server answered"), 0.5)
    assert isinstance(wait, WaitForRetry)
    assert f.timer(wait.until) == FetchRoute()
    assert isinstance(f.routed(A1, wait.until), SendAttempt)
    f = flow(None)
    f.start(0.0)
    unknown = NoRouteError("no name server knows it")
    assert f.not_routed(unknown, 0.1) == SendFailed(unknown)


def test_a_timeout_that_used_the_whole_send_timeout_fails_with_it() -> None:
    f = flow(A1, timeout=3.0)
    f.start(0.0)
    timed_out = RpcTimeout("tcp://a1:10911: no answer in time")
    assert f.unanswered(timed_out, 3.0) == SendFailed(timed_out)


def test_an_explicit_queue_is_tried_once() -> None:
    queue = MessageQueue(TOPIC, "broker-a", 1)
    f = flow(A1, queue=queue)
    attempt = f.start(0.0)
    assert isinstance(attempt, SendAttempt) and attempt.queue == queue
    refused = RpcConnectionError("refused")
    assert f.unanswered(refused, 0.01) == SendFailed(refused)
    f = flow(A1, queue=MessageQueue(TOPIC, "broker-z", 0))
    done = f.start(0.0)
    assert isinstance(done, SendFailed) and isinstance(done.error, NoRouteError)
    assert "broker-z" in str(done.error)
