"""The clients a broker knows: producer and consumer groups by connection, sans-I/O.

RocketMQ's ``ProducerManager`` and ``ConsumerManager`` in one table. A
client is known by the connection (channel) it heartbeats on, as in
RocketMQ, so one client instance holds one entry per group however many
heartbeats it sends. A consumer group's info (consume type, message
model, where to start, its subscriptions) is the last heartbeat's, and so
is what a connection's client said of itself (``ClientOrigin``: its
address, language and version, which the admin tool's connection lists show).

Every change of a consumer group's membership or subscriptions returns
the group's name: the caller tells the group's remaining connections
(NOTIFY_CONSUMER_IDS_CHANGED), so they rebalance. Changes come from a
heartbeat (a new connection, a subscription added or dropped), an
UNREGISTER_CLIENT, a closed connection and ``expire(now)``: a client
silent for ``channel_expired_timeout`` ms. A group with no connection left
is forgotten. Times are milliseconds; channels are any hashable value
(the broker uses its RPC connections).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

import attrs

from triomq.protocol.heartbeat import ConsumerData, HeartbeatData, SubscriptionData

__all__ = ["ClientChannel", "ClientOrigin", "ClientTable", "ConsumerGroupInfo", "Expired"]


@attrs.frozen
class ClientOrigin:
    """Where a heartbeat came from: the client's address (``host:port``) and the
    language and version its remoting header named (RocketMQ's ``ClientChannelInfo``)."""

    address: str = ""
    language: str = "JAVA"
    version: int = 0


@attrs.define
class ClientChannel:
    """One client's connection in a group: its id, its last heartbeat and where from."""

    client_id: str
    last_update: int
    origin: ClientOrigin = ClientOrigin()


@attrs.define
class ConsumerGroupInfo:
    """A consumer group: how it consumes, what it subscribes to, who is in it."""

    group: str
    consume_type: str
    message_model: str
    consume_from_where: str
    subscriptions: dict[str, SubscriptionData] = attrs.field(factory=dict)
    channels: dict[Hashable, ClientChannel] = attrs.field(factory=dict)

    def client_ids(self) -> list[str]:
        return [channel.client_id for channel in self.channels.values()]

    def update_channel(self, channel: Hashable, client_id: str, data: ConsumerData,
                       now: int, origin: ClientOrigin) -> bool:
        """Take a heartbeat's view of the group; whether ``channel`` is new to it."""
        self.consume_type = data.consume_type
        self.message_model = data.message_model
        self.consume_from_where = data.consume_from_where
        return _update(self.channels, channel, client_id, now, origin)

    def update_subscriptions(self, subscriptions: Iterable[SubscriptionData]) -> bool:
        """Take a heartbeat's subscriptions; whether a topic was added or dropped.

        A newer ``subVersion`` of a topic replaces the one held without counting
        as a change (RocketMQ's rule: the consumers already agree on the topic).
        """
        changed = False
        wanted = {}
        for sub in subscriptions:
            wanted[sub.topic] = sub
            held = self.subscriptions.get(sub.topic)
            if held is None:
                self.subscriptions[sub.topic] = sub
                changed = True
            elif sub.sub_version > held.sub_version:
                self.subscriptions[sub.topic] = sub
        for topic in [t for t in self.subscriptions if t not in wanted]:
            del self.subscriptions[topic]
            changed = True
        return changed


def _update(channels: dict[Hashable, ClientChannel], channel: Hashable, client_id: str,
            now: int, origin: ClientOrigin) -> bool:
    """Record a heartbeat on ``channel``; whether the channel is new."""
    held = channels.get(channel)
    if held is None:
        channels[channel] = ClientChannel(client_id, now, origin)
        return True
    held.client_id = client_id
    held.last_update = now
    held.origin = origin
    return False


@attrs.frozen
class Expired:
    """What ``expire`` did: consumer groups that changed, connections to close."""

    changed_groups: list[str]
    channels: list[Hashable]


class ClientTable:
    """Producer groups and consumer groups by connection."""

    def __init__(self, channel_expired_timeout: int = 120_000) -> None:
        self.channel_expired_timeout = channel_expired_timeout
        self._consumers: dict[str, ConsumerGroupInfo] = {}
        self._producers: dict[str, dict[Hashable, ClientChannel]] = {}

    # -- reads ---------------------------------------------------------------

    def group_known(self, group: str) -> bool:
        """Whether a consumer of ``group`` is connected (RocketMQ's consumer group info)."""
        return group in self._consumers

    def consumer_group(self, group: str) -> ConsumerGroupInfo | None:
        return self._consumers.get(group)

    def subscription(self, group: str, topic: str) -> SubscriptionData | None:
        """``group``'s subscription to ``topic``, if its consumers declared one."""
        info = self._consumers.get(group)
        return None if info is None else info.subscriptions.get(topic)

    def consumer_ids(self, group: str) -> list[str]:
        """The client ids of ``group``'s connected consumers (GET_CONSUMER_LIST_BY_GROUP)."""
        info = self._consumers.get(group)
        return [] if info is None else info.client_ids()

    def find_consumer(self, group: str, client_id: str
                      ) -> tuple[Hashable, ClientChannel] | None:
        """The connection ``group``'s consumer ``client_id`` heartbeats on, and what it
        said of itself; the first found if the id is on several."""
        info = self._consumers.get(group)
        if info is None:
            return None
        return next(((channel, client) for channel, client in info.channels.items()
                     if client.client_id == client_id), None)

    def consumer_channels(self, group: str) -> list[Hashable]:
        """The connections of ``group``'s consumers, to notify of a change."""
        info = self._consumers.get(group)
        return [] if info is None else list(info.channels)

    def producer_groups(self) -> dict[str, list[str]]:
        """Each producer group's client ids."""
        return {group: [c.client_id for c in channels.values()]
                for group, channels in self._producers.items()}

    def producer_channels(self, group: str) -> list[ClientChannel] | None:
        """The connections of ``group``'s producers; None when none is connected."""
        channels = self._producers.get(group)
        return None if channels is None else list(channels.values())

    def producer_connection(self, group: str) -> Hashable | None:
        """The connection of ``group``'s producer heard from last (None: none connected)."""
        channels = self._producers.get(group)
        if not channels:
            return None
        return max(channels.items(), key=lambda item: item[1].last_update)[0]

    def groups_subscribing(self, topic: str) -> set[str]:
        """The groups whose connected consumers subscribe to ``topic``."""
        return {group for group, info in self._consumers.items()
                if topic in info.subscriptions}

    # -- changes -------------------------------------------------------------

    def heartbeat(self, channel: Hashable, heartbeat: HeartbeatData, now: int,
                  origin: ClientOrigin = ClientOrigin()) -> list[str]:
        """Register what a heartbeat declares; the consumer groups that changed."""
        changed = []
        for data in heartbeat.consumers:
            info = self._consumers.get(data.group_name)
            if info is None:
                info = self._consumers[data.group_name] = ConsumerGroupInfo(
                    data.group_name, data.consume_type, data.message_model,
                    data.consume_from_where)
            joined = info.update_channel(channel, heartbeat.client_id, data, now, origin)
            if info.update_subscriptions(data.subscriptions) or joined:
                changed.append(data.group_name)
        for group in heartbeat.producer_groups:
            _update(self._producers.setdefault(group, {}), channel, heartbeat.client_id, now,
                    origin)
        return changed

    def unregister(self, channel: Hashable, producer_group: str | None,
                   consumer_group: str | None) -> list[str]:
        """UNREGISTER_CLIENT: leave the groups named; the consumer groups that changed."""
        if producer_group:
            self._drop_producer(producer_group, channel)
        if consumer_group and self._drop_consumer(consumer_group, channel):
            return [consumer_group]
        return []

    def connection_closed(self, channel: Hashable) -> list[str]:
        """Forget ``channel`` in every group; the consumer groups that changed."""
        for group in list(self._producers):
            self._drop_producer(group, channel)
        return [group for group in list(self._consumers) if self._drop_consumer(group, channel)]

    def expire(self, now: int) -> Expired:
        """Drop clients silent for longer than ``channel_expired_timeout``."""
        limit = now - self.channel_expired_timeout
        stale: dict[Hashable, None] = {}  # a dict: in the order found
        changed = []
        for group, info in list(self._consumers.items()):
            old = [ch for ch, client in info.channels.items() if client.last_update < limit]
            stale.update(dict.fromkeys(old))
            if old and self._drop_consumer(group, *old):
                changed.append(group)
        for group, channels in list(self._producers.items()):
            old = [ch for ch, client in channels.items() if client.last_update < limit]
            stale.update(dict.fromkeys(old))
            for ch in old:
                self._drop_producer(group, ch)
        return Expired(changed, list(stale))

    def _drop_consumer(self, group: str, *channels: Hashable) -> bool:
        info = self._consumers.get(group)
        if info is None:
            return False
        dropped = [info.channels.pop(ch) for ch in channels if ch in info.channels]
        if not info.channels:
            del self._consumers[group]
        return bool(dropped)

    def _drop_producer(self, group: str, channel: Hashable) -> None:
        channels = self._producers.get(group)
        if channels is not None:
            channels.pop(channel, None)
            if not channels:
                del self._producers[group]
