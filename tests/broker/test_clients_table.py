"""The pure client table: registrations by connection, what changes, what expires."""

from __future__ import annotations

from triomq.broker.client_table import ClientTable
from triomq.broker.heartbeat import ConsumerData, HeartbeatData, SubscriptionData


def beat(client_id: str, *topics: str, group: str = "cg", version: int = 1,
         producer: str | None = None) -> HeartbeatData:
    subs = tuple(SubscriptionData(t, sub_version=version) for t in topics)
    return HeartbeatData(client_id, (producer,) if producer else (),
                         (ConsumerData(group, subscriptions=subs),))


def test_changes_are_joins_leaves_and_topics() -> None:
    table = ClientTable(channel_expired_timeout=120_000)
    assert table.heartbeat("ch1", beat("c1", "t"), now=0) == ["cg"]
    assert table.heartbeat("ch1", beat("c1", "t"), now=1) == []
    assert table.heartbeat("ch1", beat("c1", "t", version=2), now=2) == []  # newer, same topic
    assert table.subscription("cg", "t").sub_version == 2
    assert table.heartbeat("ch1", beat("c1", "t", version=1), now=3) == []
    assert table.subscription("cg", "t").sub_version == 2  # an older one does not replace it
    assert table.heartbeat("ch2", beat("c2", "t"), now=4) == ["cg"]
    assert table.heartbeat("ch2", beat("c2", "t", "u"), now=5) == ["cg"]
    assert table.heartbeat("ch2", beat("c2", "u"), now=6) == ["cg"]  # t dropped
    assert table.consumer_ids("cg") == ["c1", "c2"]
    assert table.consumer_channels("cg") == ["ch1", "ch2"]
    assert table.unregister("ch2", None, "cg") == ["cg"]
    assert table.unregister("ch2", None, "cg") == []
    assert table.unregister("ch1", None, "other") == []
    assert table.connection_closed("ch1") == ["cg"]
    assert not table.group_known("cg") and table.consumer_ids("cg") == []


def test_silent_clients_expire_with_their_groups() -> None:
    table = ClientTable(channel_expired_timeout=100)
    table.heartbeat("ch1", beat("c1", "t", producer="pg"), now=0)
    table.heartbeat("ch2", beat("c2", "t"), now=0)
    table.heartbeat("ch3", beat("c3", "t", group="lone"), now=0)
    table.heartbeat("ch2", beat("c2", "t"), now=50)
    expired = table.expire(now=100)
    assert (expired.changed_groups, expired.channels) == ([], [])  # 100 ms exactly: kept
    expired = table.expire(now=101)
    assert expired.changed_groups == ["cg", "lone"] and expired.channels == ["ch1", "ch3"]
    assert table.consumer_ids("cg") == ["c2"] and not table.group_known("lone")
    assert table.producer_groups() == {}
    assert table.expire(now=151).channels == ["ch2"]
