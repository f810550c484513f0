"""The route table's admin queries and write-permission changes, pure."""

from __future__ import annotations

from triomq.namesrv.core.route_info import BrokerRegistration, RouteInfo
from triomq.protocol.route import DataVersion, RegisterBrokerBody, TopicConfig


def registration(cluster: str, group: str, broker_id: int, address: str,
                 *topics: TopicConfig, counter: int = 1) -> BrokerRegistration:
    body = RegisterBrokerBody(DataVersion(counter=counter, timestamp=1),
                              {t.topic_name: t for t in topics})
    return BrokerRegistration(cluster, group, broker_id, address, body=body)


def two_clusters() -> RouteInfo:
    route = RouteInfo()
    route.register(registration("c1", "broker-a", 0, "10.0.0.1:10911",
                                TopicConfig("orders", perm=6), TopicConfig("shared", perm=6)), 0)
    route.register(registration("c1", "broker-a", 1, "10.0.0.2:10911"), 0)
    route.register(registration("c2", "broker-b", 0, "10.0.0.3:10911",
                                TopicConfig("payments", perm=4), TopicConfig("shared", perm=6)),
                   0)
    return route


def test_topics_of_a_cluster() -> None:
    route = two_clusters()
    assert route.topics_of_cluster("c1") == ["orders", "shared"]
    assert route.topics_of_cluster("c2") == ["payments", "shared"]
    assert route.topics_of_cluster("nope") == []


def test_system_topics_are_the_cluster_and_group_names_with_one_broker_to_ask() -> None:
    assert two_clusters().system_topics() == (["broker-a", "broker-b", "c1", "c2"],
                                              "10.0.0.1:10911")
    assert RouteInfo().system_topics() == ([], None)


def test_wipe_then_add_write_permission_of_a_group() -> None:
    route = two_clusters()
    version = route.version
    assert route.set_write_permission("broker-a", writable=False) == 2
    assert route.version > version
    assert route.topic_config("orders", "broker-a").perm == 4
    assert route.topic_config("shared", "broker-b").perm == 6  # another group: untouched
    # RocketMQ's ADD sets read-write whatever the queues were (a read-only topic too).
    assert route.set_write_permission("broker-b", writable=True) == 2
    assert route.topic_config("payments", "broker-b").perm == 6
    assert route.set_write_permission("broker-a", writable=True) == 2
    assert route.topic_config("orders", "broker-a").perm == 6
    version = route.version
    assert route.set_write_permission("nope", writable=False) == 0
    assert route.version == version


def test_a_wiped_group_stays_wiped_until_its_topics_change() -> None:
    route = two_clusters()
    route.set_write_permission("broker-a", writable=False)
    again = registration("c1", "broker-a", 0, "10.0.0.1:10911",
                         TopicConfig("orders", perm=6), TopicConfig("shared", perm=6))
    route.register(again, 10)
    assert route.topic_config("orders", "broker-a").perm == 4
    route.register(registration("c1", "broker-a", 0, "10.0.0.1:10911",
                                TopicConfig("orders", perm=6), counter=2), 20)
    assert route.topic_config("orders", "broker-a").perm == 6
