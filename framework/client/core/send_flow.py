"""One send, from its first attempt to its result: retries, route refreshes and
waiting out a failover. Pure: the producer's driver feeds it answers, routes
and timer fires with ``now``, and does what it returns.

A send has ``send_msg_timeout`` seconds (RocketMQ's ``sendMsgTimeout``) in
all. Within them:

- an answer that stores the message is the result (``Sent``), whatever its
  status;
- a refusal RocketMQ does not retry (``MESSAGE_ILLEGAL``, ...) fails at once;
- a retriable refusal that says nothing about the route (``SYSTEM_BUSY``,
  ``SYSTEM_ERROR``, ...) is tried again on another group, at most
  ``retry_times_when_send_failed`` times, as RocketMQ's producer does;
- no answer, or an answer saying the route is stale (the broker is no longer
  master, the topic or write permission moved), means the group may be
  failing over: the flow fetches the route and tries again at once on
  another group, or on this group if the route names a new master. While
  the route names no writable queue (the group has no master yet), or still
  names the master that failed, it waits and fetches it again, backing off
  as ``triomq.client.core.failover_pause`` says, until a master is routed or the
  time is up. RocketMQ's producer gives up
  after its three quick attempts there; waiting for the new master is what
  lets a send ride through a failover of under a second;
- a route fetch that no name server answers is tried again the same way; a
  topic no name server knows (nor the default topic) fails at once.

A send that runs out of time fails with the reason of its last failed
attempt, or with ``NoRouteError`` saying how long no master was routed.
With an explicit queue there is one attempt, as RocketMQ's ``send(msg, mq)``.
"""

from __future__ import annotations

import attrs

from triomq.client.core.errors import BrokerError, ClientError, NoRouteError
from triomq.client.core.failover_pause import FIRST_PAUSE, next_pause
from triomq.client.core.message import MessageQueue, SendResult, SendStatus
from triomq.client.core.publish import (
    QueueSelector,
    TopicPublishInfo,
    refreshes_route,
    retriable,
    send_status,
)
from triomq.protocol.remoting import RemotingCommand

__all__ = [
    "FetchRoute",
    "SendAction",
    "SendAttempt",
    "SendFailed",
    "SendFlow",
    "Sent",
    "WaitForRetry",
]

@attrs.frozen
class SendAttempt:
    """Send to ``queue`` on its master ``address``, waiting ``timeout`` seconds at most;
    then ``answered`` or ``unanswered``."""

    queue: MessageQueue
    address: str
    timeout: float


@attrs.frozen
class FetchRoute:
    """Fetch the topic's route from the name servers; then ``routed`` or ``not_routed``."""


@attrs.frozen
class WaitForRetry:
    """Nothing to do before ``until``; then ``timer``."""

    until: float


@attrs.frozen
class Sent:
    """The message is stored: the send's result."""

    result: SendResult


@attrs.frozen
class SendFailed:
    """The send is over without a stored message; ``error`` says why."""

    error: Exception


SendAction = SendAttempt | FetchRoute | WaitForRetry | Sent | SendFailed


class SendFlow:
    """The attempts of one send of message ``unique_id`` to ``topic``.

    ``info``: the producer's publish info for the topic, ``None`` when it has
    none. ``selector`` picks the queues (shared by the producer's sends).
    ``queue``: send to that queue only, once.
    """

    def __init__(self, topic: str, unique_id: str, info: TopicPublishInfo | None,
                 selector: QueueSelector, *, now: float, send_msg_timeout: float,
                 retry_times_when_send_failed: int, queue: MessageQueue | None = None) -> None:
        self.topic = topic
        self.unique_id = unique_id
        self.deadline = now + send_msg_timeout
        self._timeout = send_msg_timeout
        self._info = info
        self._selector = selector
        self._queue = queue
        self._retries_left = 0 if queue is not None else retry_times_when_send_failed
        self._pause = FIRST_PAUSE
        self._last_broker: str | None = None
        # The publish info the last failed attempt used, and whether the flow has
        # paused since: an unchanged route is tried again only after a pause.
        self._failed_with: TopicPublishInfo | None = None
        self._paused = False
        self._target: MessageQueue | None = None
        #: Why the last attempt or route fetch failed.
        self.last_error: Exception | None = None
        self._done = False

    # -- inputs ------------------------------------------------------------------

    def start(self, now: float) -> SendAction:
        """The first action."""
        if self._info is None or not self._info.ok:
            return FetchRoute()
        return self._attempt(now)

    def answered(self, address: str, answer: RemotingCommand, now: float) -> SendAction:
        """The broker at ``address`` answered the last ``SendAttempt``."""
        target = self._attempted()
        status = send_status(answer.code)
        if status is not None:
            return self._end(Sent(_result(status, answer, target, self.unique_id)))
        error = BrokerError(address, answer.code, answer.remark)
        self._failed(error, target)
        if self._queue is not None or not retriable(answer.code):
            return self._end(SendFailed(error))
        if refreshes_route(answer.code):
            return self._refresh(now)
        if self._retries_left <= 0:
            return self._end(SendFailed(error))
        self._retries_left -= 1
        return self._attempt(now)

    def unanswered(self, error: Exception, now: float) -> SendAction:
        """The last ``SendAttempt`` got no answer (``error``: a timeout, a lost connection)."""
        self._failed(error, self._attempted())
        if self._queue is not None:
            return self._end(SendFailed(error))
        return self._refresh(now)

    def routed(self, info: TopicPublishInfo, now: float) -> SendAction:
        """The route fetched for ``FetchRoute``, as publish info."""
        self._info = info
        if self._queue is not None:
            return self._attempt(now)
        if not info.ok:
            return self._pause_then_fetch(now)
        if info == self._failed_with and not self._paused and not self._elsewhere(info):
            # The route still names the master that just failed, and no other group
            # has queues: give the group time to fail over before trying it again.
            return self._pause_then_fetch(now)
        return self._attempt(now)

    def not_routed(self, error: Exception, now: float) -> SendAction:
        """No route came for ``FetchRoute``: ``NoRouteError`` when no name server knows the
        topic (final), anything else when none answered (tried again)."""
        if isinstance(error, NoRouteError):
            return self._end(SendFailed(error))
        self.last_error = error
        return self._pause_then_fetch(now)

    def timer(self, now: float) -> SendAction:
        """A ``WaitForRetry`` is over."""
        return FetchRoute() if now < self.deadline else self._expired()

    # -- steps -------------------------------------------------------------------

    def _attempt(self, now: float) -> SendAction:
        remaining = self.deadline - now
        if remaining <= 0:
            return self._expired()
        info = self._info
        assert info is not None
        target = self._queue
        if target is None:
            if not info.ok:
                return self._pause_then_fetch(now)
            target = self._selector.select(info, self._last_broker)
        address = info.masters.get(target.broker_name)
        if address is None:
            if self._queue is not None:
                return self._end(SendFailed(NoRouteError(
                    f"no master known for {target.broker_name} (queue {target.queue_id} "
                    f"of {self.topic!r})")))
            return self._pause_then_fetch(now)
        self._target = target
        self._paused = False
        return SendAttempt(target, address, remaining)

    def _refresh(self, now: float) -> SendAction:
        # The first fetch after a failed attempt goes at once: the route may already
        # name the new master.
        return FetchRoute() if now < self.deadline else self._expired()

    def _pause_then_fetch(self, now: float) -> SendAction:
        if now >= self.deadline:
            return self._expired()
        # The last pause ends at the deadline: a send fails no sooner than its timeout.
        until = min(now + self._pause, self.deadline)
        self._pause = next_pause(self._pause)
        self._paused = True
        return WaitForRetry(until)

    def _expired(self) -> SendAction:
        if self.last_error is not None:
            return self._end(SendFailed(self.last_error))
        return self._end(SendFailed(NoRouteError(
            f"topic {self.topic!r} had no writable queue on a known master for "
            f"{self._timeout:g} s (send_msg_timeout)")))

    def _failed(self, error: Exception, target: MessageQueue) -> None:
        self.last_error, self._last_broker = error, target.broker_name
        self._failed_with = self._info

    def _elsewhere(self, info: TopicPublishInfo) -> bool:
        return any(q.broker_name != self._last_broker for q in info.message_queues)

    def _attempted(self) -> MessageQueue:
        if self._target is None or self._done:
            raise ClientError("an answer came for no attempt of this send")
        target, self._target = self._target, None
        return target

    def _end(self, action: Sent | SendFailed) -> SendAction:
        self._done = True
        return action


def _result(status: SendStatus, answer: RemotingCommand, queue: MessageQueue,
            unique_id: str) -> SendResult:
    fields = answer.ext_fields
    return SendResult(status, unique_id, fields.get("msgId", ""),
                      MessageQueue(queue.topic, queue.broker_name,
                                   int(fields.get("queueId", queue.queue_id))),
                      int(fields.get("queueOffset", "-1")))
