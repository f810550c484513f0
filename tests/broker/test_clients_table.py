"""The pure client table: registrations by connection, what changes, what expires, and
which consumer a request passed on reaches."""

from __future__ import annotations

import json

from triomq.broker.consume.core.client_table import ClientOrigin, ClientTable
from triomq.broker.consume.core.connection_bodies import (
    consumer_connection,
    group_list,
    producer_connection,
)
from triomq.broker.consume.core.consumer_calls import CallRefused, ConsumerCall, consumer_to_call
from triomq.protocol.heartbeat import ConsumerData, HeartbeatData, SubscriptionData


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


def test_each_connection_keeps_where_its_last_heartbeat_came_from() -> None:
    table = ClientTable()
    table.heartbeat("ch1", beat("c1", "t", producer="pg"), now=0,
                    origin=ClientOrigin("10.0.0.5:4000", "JAVA", 435))
    table.heartbeat("ch1", beat("c1", "t", producer="pg"), now=1,
                    origin=ClientOrigin("10.0.0.5:4000", "JAVA", 479))
    table.heartbeat("ch2", beat("c2", "u", group="other"), now=1,
                    origin=ClientOrigin("10.0.0.6:4001", "GO", 1))
    producers = table.producer_channels("pg")
    assert producers is not None and [(c.client_id, c.origin) for c in producers] == [
        ("c1", ClientOrigin("10.0.0.5:4000", "JAVA", 479))]
    assert table.producer_channels("nobody") is None
    info = table.consumer_group("cg")
    assert info is not None and [c.origin.version for c in info.channels.values()] == [479]
    assert table.groups_subscribing("t") == {"cg"} and table.groups_subscribing("v") == set()
    table.connection_closed("ch1")
    assert table.producer_channels("pg") is None and table.groups_subscribing("t") == set()


def test_the_connection_bodies_are_rocketmqs_beans() -> None:
    table = ClientTable()
    table.heartbeat("ch2", beat("c2", "t", producer="pg"), now=0,
                    origin=ClientOrigin("10.0.0.6:4001", "JAVA", 479))
    table.heartbeat("ch1", beat("c1", "t", producer="pg"), now=0,
                    origin=ClientOrigin("10.0.0.5:4000", "CPP", 3))
    info = table.consumer_group("cg")
    assert info is not None
    connections = [
        {"clientAddr": "10.0.0.5:4000", "clientId": "c1", "language": "CPP", "version": 3},
        {"clientAddr": "10.0.0.6:4001", "clientId": "c2", "language": "JAVA", "version": 479}]
    assert json.loads(consumer_connection(info)) == {
        "connectionSet": connections, "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
        "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "subscriptionTable": {"t": {"classFilterMode": False, "codeSet": [],
                                    "expressionType": "TAG", "subString": "*",
                                    "subVersion": 1, "tagsSet": [], "topic": "t"}}}
    channels = table.producer_channels("pg")
    assert channels is not None
    assert producer_connection(channels) == json.dumps(
        {"connectionSet": connections}, separators=(",", ":")).encode()
    assert group_list({"b", "a"}) == b'{"groupList":["a","b"]}'


def test_the_consumer_to_call_is_found_by_group_and_client_id() -> None:
    table = ClientTable()
    table.heartbeat("ch1", beat("c1", "t"), now=0, origin=ClientOrigin("h:1", "JAVA", 479))
    table.heartbeat("ch2", beat("c2", "t"), now=0, origin=ClientOrigin("h:2", "JAVA", 61))
    assert consumer_to_call(table, ConsumerCall("cg", "c1")) == "ch1"
    assert consumer_to_call(table, ConsumerCall("cg", "c2")) == CallRefused(
        1, "The Consumer <c2> Version <61> too low to finish, please upgrade it to "
           "V3_1_8_SNAPSHOT")
    for group, client_id in (("cg", "c3"), ("other", "c1")):
        assert consumer_to_call(table, ConsumerCall(group, client_id)) == CallRefused(
            1, f"The Consumer <{group}> <{client_id}> not online")
    table.connection_closed("ch1")
    assert table.find_consumer("cg", "c1") is None
