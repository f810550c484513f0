"""The route table (RouteInfoManager's rules), driven directly: no I/O, time passed in."""

from __future__ import annotations

import pytest

from triomq.controller.core.wire import BrokerEpochCache, EpochRange
from triomq.namesrv.core.route_info import (
    MAX_VOUCHES_IN_FLIGHT,
    STATE_VERSION_LEAD_LIMIT,
    VOUCH_RETRY_MS,
    BrokerKey,
    BrokerRegistration,
    MinBrokerIdChanged,
    RegisterResult,
    RouteInfo,
    RouteRefused,
)
from triomq.protocol.route import PERM_READ, DataVersion, RegisterBrokerBody, TopicConfig

FIRST_VERSION = DataVersion(0, 1, 1)


def reg(broker_id: int, address: str, *, name: str = "broker-a", cluster: str = "c1",
        topics: tuple[str, ...] = ("orders",), version: DataVersion = FIRST_VERSION,
        timeout: int | None = None, acting: bool | None = True,
        perm: int = 6) -> BrokerRegistration:
    table = {t: TopicConfig(t, 4, 4, perm) for t in topics}
    return BrokerRegistration(cluster, name, broker_id, address, address + "-ha",
                              RegisterBrokerBody(version, table), timeout, acting)


def addrs(route: RouteInfo, topic: str = "orders") -> dict[int, str]:
    found = route.topic_route(topic)
    assert found is not None
    (broker,) = found.broker_datas
    return dict(broker.broker_addrs)


def test_a_master_and_slaves_are_routed_and_slaves_learn_the_master() -> None:
    route = RouteInfo()
    assert route.register(reg(0, "h:1"), now=0) == RegisterResult()
    assert route.register(reg(1, "h:2"), now=0) == RegisterResult("h:1", "h:1-ha")
    assert addrs(route) == {0: "h:1", 1: "h:2"}
    found = route.topic_route("orders")
    assert found is not None and found.queue_datas[0].write_queue_nums == 4
    assert route.topic_route("nope") is None
    assert route.topics() == ["orders"]


def test_a_promoted_slave_moves_to_id_0_and_the_deposed_master_cannot_take_it_back() -> None:
    route = RouteInfo()
    route.register(reg(0, "h:1", version=DataVersion(1, 1, 1)), now=0)
    route.register(reg(2, "h:2", version=DataVersion(1, 1, 1)), now=0)
    # The new master registers with its master epoch as the state version.
    route.register(reg(0, "h:2", version=DataVersion(2, 5, 2)), now=10)
    assert addrs(route) == {0: "h:2"}
    with pytest.raises(RouteRefused, match="held by h:2 with state version 2"):
        route.register(reg(0, "h:1", version=DataVersion(1, 9, 9)), now=20)
    assert addrs(route) == {0: "h:2"}
    route.register(reg(1, "h:1", version=DataVersion(2, 30, 3)), now=30)
    assert addrs(route) == {0: "h:2", 1: "h:1"}


def answer_vouches(route: RouteInfo, masters: dict[str, int], now: int = 0) -> list[str]:
    """Answer every question out as the brokers would: ``masters`` maps an address to
    the epoch it is master at (any other address gives no answer). The addresses asked."""
    asked = []
    while vouches := route.take_vouches():
        for vouch in vouches:
            asked.append(vouch.address)
            epoch = masters.get(vouch.address)
            answer = None if epoch is None else BrokerEpochCache(
                vouch.cluster, vouch.broker_name, 0, [EpochRange(epoch, 0)], 0)
            route.vouched(vouch, answer, now)
    return asked


def test_a_deposed_master_cannot_take_id_0_back_after_the_new_one_left() -> None:
    route = RouteInfo()
    route.register(reg(0, "h:1", version=DataVersion(1, 1, 1)), now=0, connection="old")
    route.register(reg(0, "h:2", version=DataVersion(2, 5, 2)), now=10, connection="new")
    assert answer_vouches(route, {"h:1": 1, "h:2": 2}) == ["h:1", "h:2"]
    route.connection_closed("new")
    route.expire(now=200_000)  # the group left the table altogether
    assert route.cluster_info().broker_addr_table == {}
    with pytest.raises(RouteRefused, match="state version 1 is older than 2"):
        route.register(reg(0, "h:1", version=DataVersion(1, 9, 9)), now=200_001)
    assert route.topic_route("orders") is None
    # A slave's registration is no master's; the newest master epoch or a newer one is.
    route.register(reg(1, "h:1", version=DataVersion(1, 9, 9)), now=200_002)
    route.register(reg(0, "h:3", version=DataVersion(2, 7, 1)), now=200_003)
    assert addrs(route) == {0: "h:3", 1: "h:1"}
    assert answer_vouches(route, {}) == []  # no newer than the one vouched for
    assert RouteInfo().register(reg(0, "h:1", version=DataVersion(1, 9, 9)), now=0) == (
        RegisterResult())  # a restarted name server knows no epoch


def test_a_version_nobody_vouched_for_goes_with_its_registration() -> None:
    route = RouteInfo()
    route.register(reg(0, "h:1", version=DataVersion(3, 1, 1)), now=0, connection="real")
    assert answer_vouches(route, {"h:1": 3}) == ["h:1"]
    # Slightly ahead, in the master's name, from another connection: the name server
    # cannot tell it from the master's own while it lasts, and the master, asked,
    # does not vouch for it...
    route.register(reg(0, "h:1", version=DataVersion(4, 1, 1)), now=1, connection="forger")
    assert answer_vouches(route, {"h:1": 3}) == ["h:1"]
    with pytest.raises(RouteRefused, match=r"DataVersion \(3, 2, 2\) is older"):
        route.register(reg(0, "h:1", version=DataVersion(3, 2, 2)), now=2, connection="real")
    # ...so once its connection is gone, the master registers at its own version again.
    route.connection_closed("forger")
    assert route.register(reg(0, "h:1", version=DataVersion(3, 3, 3)), now=3,
                          connection="real") == RegisterResult()
    assert addrs(route) == {0: "h:1"}
    # The same in a made-up address's name, where nothing answers.
    route.register(reg(0, "h:6", version=DataVersion(4, 1, 1)), now=4, connection="forger")
    assert addrs(route) == {0: "h:6"}
    assert answer_vouches(route, {"h:1": 3}) == ["h:6"]
    route.connection_closed("forger")
    assert route.register(reg(0, "h:1", version=DataVersion(3, 4, 4)), now=5,
                          connection="real") == RegisterResult()
    assert addrs(route) == {0: "h:1"}
    # A newer version another address vouched for is the newer master's, gone or not.
    route.register(reg(0, "h:2", version=DataVersion(5, 1, 1)), now=6, connection="new")
    assert answer_vouches(route, {"h:2": 5}) == ["h:2"]
    route.connection_closed("new")
    with pytest.raises(RouteRefused, match="state version 3 is older than 5"):
        route.register(reg(0, "h:1", version=DataVersion(3, 5, 5)), now=7, connection="real")


@pytest.mark.parametrize("answer, why", [
    (BrokerEpochCache("c1", "broker-a", 1, [EpochRange(5, 0)], 0), "a slave"),
    (BrokerEpochCache("c1", "broker-b", 0, [EpochRange(5, 0)], 0), "another group's master"),
    (BrokerEpochCache("c2", "broker-a", 0, [EpochRange(5, 0)], 0), "another cluster's"),
    (BrokerEpochCache("c1", "broker-a", 0, [EpochRange(3, 0), EpochRange(4, 9)], 0),
     "the group's master at an older epoch"),
    (BrokerEpochCache("c1", "broker-a", 0, [], 0), "a master of no epoch"),
])
def test_only_the_groups_master_at_that_epoch_vouches(answer: BrokerEpochCache,
                                                       why: str) -> None:
    route = RouteInfo()
    route.register(reg(0, "h:1", version=DataVersion(3, 1, 1)), now=0, connection="real")
    answer_vouches(route, {"h:1": 3})
    route.register(reg(0, "h:2", version=DataVersion(5, 1, 1)), now=1, connection="other")
    (vouch,) = route.take_vouches()
    route.vouched(vouch, answer, now=2)
    route.connection_closed("other")
    assert route.register(reg(0, "h:1", version=DataVersion(3, 2, 2)), now=3,
                          connection="real") == RegisterResult(), why


def test_one_question_per_group_at_a_time_and_no_repeat_soon_after_a_no() -> None:
    route = RouteInfo()
    route.register(reg(0, "h:1", version=DataVersion(3, 1, 1)), now=0, connection="a")
    (first,) = route.take_vouches()
    # Another master meanwhile: asked about once the first question is answered.
    route.register(reg(0, "h:2", version=DataVersion(4, 1, 1)), now=1, connection="b")
    assert route.take_vouches() == []
    route.vouched(first, None, now=2)
    (second,) = route.take_vouches()
    assert (second.address, second.state_version) == ("h:2", 4)
    route.vouched(second, None, now=3)
    # Registering again soon after a no asks nothing; later it asks again.
    route.register(reg(0, "h:2", version=DataVersion(4, 2, 2)), now=4, connection="b")
    assert route.take_vouches() == []
    route.register(reg(0, "h:2", version=DataVersion(4, 3, 3)), now=3 + VOUCH_RETRY_MS,
                   connection="b")
    assert [v.address for v in route.take_vouches()] == ["h:2"]
    # An answer to a question not out changes nothing.
    route.vouched(first, BrokerEpochCache("c1", "broker-a", 0, [EpochRange(9, 0)], 0), 5)
    route.connection_closed("b")
    route.register(reg(0, "h:1", version=DataVersion(3, 2, 2)), now=6, connection="a")
    assert addrs(route) == {0: "h:1"}


def test_questions_out_at_once_are_bounded() -> None:
    route = RouteInfo()
    for index in range(MAX_VOUCHES_IN_FLIGHT + 5):
        route.register(reg(0, f"h:{index + 1}", name=f"g{index}",
                           version=DataVersion(2, 1, 1)), now=0, connection=index)
    assert len(route.take_vouches()) == MAX_VOUCHES_IN_FLIGHT


def test_a_state_version_far_ahead_outranks_no_live_master() -> None:
    route = RouteInfo()
    far = 3 + STATE_VERSION_LEAD_LIMIT + 1
    route.register(reg(0, "h:1", version=DataVersion(3, 1, 1)), now=0, connection="real")
    # Far ahead of the live master: refused, at its address or another.
    with pytest.raises(RouteRefused, match=f"state version {far} is more than 64 ahead of "
                                           "the live master h:1's 3"):
        route.register(reg(0, "h:9", version=DataVersion(far, 1, 1)), now=1, connection="x")
    with pytest.raises(RouteRefused, match=f"state version {far} is more than 64 ahead of "
                                           "the registered 3"):
        route.register(reg(0, "h:1", version=DataVersion(far, 1, 1)), now=1, connection="x")
    assert addrs(route) == {0: "h:1"}
    # Taken while the master was away, id 0 goes back to the master, at its own version.
    route.connection_closed("real")
    route.register(reg(0, "h:9", version=DataVersion(999, 1, 1)), now=2, connection="x")
    assert route.register(reg(0, "h:1", version=DataVersion(3, 2, 2)), now=3,
                          connection="real") == RegisterResult()
    assert addrs(route) == {0: "h:1"}
    route.connection_closed("real")
    route.register(reg(0, "h:1", version=DataVersion(999, 1, 1)), now=4, connection="x2")
    route.connection_closed("x2")  # a forged registration goes with its connection
    assert route.register(reg(0, "h:1", version=DataVersion(3, 3, 3)), now=5,
                          connection="real") == RegisterResult()
    assert addrs(route) == {0: "h:1"}


def test_a_closed_connection_removes_its_broker_at_once() -> None:
    route = RouteInfo()
    route.register(reg(0, "h:1"), now=0, connection="conn-1")
    route.register(reg(1, "h:2"), now=0, connection="conn-2")
    assert route.connection_closed("conn-1") == [BrokerKey("c1", "h:1")]
    assert addrs(route) == {1: "h:2"}
    route.connection_closed("conn-2")
    assert route.topic_route("orders") is None
    assert route.cluster_info().broker_addr_table == {}


def test_a_silent_broker_leaves_after_its_own_timeout() -> None:
    route = RouteInfo(default_broker_timeout_ms=10_000)
    route.register(reg(0, "h:1", timeout=1_000), now=0)
    route.register(reg(1, "h:2"), now=0)
    assert route.next_expiry() == 1_001
    assert route.expire(now=1_000) == []
    route.heartbeat("c1", "h:1", now=900)
    assert route.expire(now=1_901) == [BrokerKey("c1", "h:1")]
    assert addrs(route) == {1: "h:2"}
    assert route.expire(now=10_001) == [BrokerKey("c1", "h:2")]
    assert route.next_expiry() is None


@pytest.mark.parametrize("bad, fragment", [
    (reg(0, "h:9", cluster="other"), "belongs to cluster c1, not other"),
    (reg(0, "h:9", name="bad name"), "bad broker name"),
    (reg(-1, "h:9"), "negative"),
    (reg(0, "no-port"), "not host:port"),
    (reg(0, "h:9", timeout=0), "not positive"),
    (reg(0, "h:1", version=DataVersion(0, 0, 0)), "older than the registered"),
])
def test_bad_registrations_are_refused_and_change_nothing(bad: BrokerRegistration,
                                                          fragment: str) -> None:
    route = RouteInfo()
    route.register(reg(0, "h:1", version=DataVersion(0, 5, 5)), now=0)
    before = route.snapshot()
    with pytest.raises(RouteRefused, match=fragment) as refused:
        route.register(bad, now=1)
    assert refused.value.code == 1
    assert route.snapshot() == before


def test_a_heartbeat_from_an_unknown_broker_is_refused() -> None:
    with pytest.raises(RouteRefused, match="not registered"):
        RouteInfo().heartbeat("c1", "h:1", now=0)


def test_topic_changes_count_only_when_the_data_version_moves() -> None:
    route = RouteInfo()
    route.register(reg(0, "h:1", topics=("a",), version=DataVersion(0, 1, 1)), now=0)
    route.register(reg(0, "h:1", topics=("a", "b"), version=DataVersion(0, 2, 2)), now=1)
    assert route.topics() == ["a", "b"]
    # A slave's topics never make routes while there is a master.
    route.register(reg(1, "h:2", topics=("c",)), now=2)
    assert route.topics() == ["a", "b"]


def test_deleting_a_topic_in_one_cluster_keeps_the_others() -> None:
    route = RouteInfo()
    route.register(reg(0, "h:1", name="ga", cluster="c1"), now=0)
    route.register(reg(0, "h:2", name="gb", cluster="c2"), now=0)
    assert route.delete_topic("orders", "c1")
    found = route.topic_route("orders")
    assert found is not None and [b.broker_name for b in found.broker_datas] == ["gb"]
    assert route.delete_topic("orders")
    assert not route.delete_topic("orders")


def test_an_acting_master_is_routed_as_id_0_read_only() -> None:
    route = RouteInfo(support_acting_master=True)
    route.register(reg(0, "h:1"), now=0, connection="m")
    route.register(reg(1, "h:2"), now=0, connection="s1")
    route.register(reg(2, "h:3"), now=0, connection="s2")
    route.take_notices()
    route.connection_closed("m")
    # The master left: the queues are read-only, the smallest slave stands in as 0.
    assert addrs(route) == {0: "h:2", 2: "h:3"}
    found = route.topic_route("orders")
    assert found is not None and found.queue_datas[0].perm == PERM_READ
    assert route.member_group("c1", "broker-a").broker_addrs == {1: "h:2", 2: "h:3"}
    assert route.take_notices() == [MinBrokerIdChanged("broker-a", 1, "h:2", "h:1", None,
                                                       ("h:2", "h:3"))]


def test_without_acting_master_support_a_masterless_group_has_no_id_0() -> None:
    route = RouteInfo(support_acting_master=False)
    route.register(reg(0, "h:1"), now=0, connection="m")
    route.register(reg(1, "h:2"), now=0, connection="s1")
    route.connection_closed("m")
    assert addrs(route) == {1: "h:2"}


def test_member_group_of_an_unknown_group_is_refused() -> None:
    route = RouteInfo()
    route.register(reg(0, "h:1"), now=0, connection="m")
    assert route.member_group("c1", "broker-a").broker_addrs == {0: "h:1"}
    before = route.snapshot()
    for cluster, group in (("c2", "broker-a"), ("c1", "broker-b")):
        with pytest.raises(RouteRefused, match=f"no broker of group '{group}' in cluster "
                                               f"'{cluster}' is registered"):
            route.member_group(cluster, group)
    assert route.snapshot() == before
    # A group whose last member left is unknown again.
    route.connection_closed("m")
    with pytest.raises(RouteRefused):
        route.member_group("c1", "broker-a")


def test_register_topic_needs_registered_groups() -> None:
    route = RouteInfo()
    route.register(reg(0, "h:1", topics=()), now=0)
    route.register_topic("t", {"broker-a": TopicConfig("t", 2, 2)})
    assert route.topics() == ["t"]
    with pytest.raises(RouteRefused, match="unknown broker group"):
        route.register_topic("u", {"nope": TopicConfig("u")})


def test_encoded_routes_are_kept_only_while_the_table_is_unchanged() -> None:
    route = RouteInfo()
    route.register(reg(0, "h:1"), now=0, connection="m")
    first = route.route_body("orders")
    assert first is not None and route.route_body("orders") is first
    route.register(reg(1, "h:2"), now=1, connection="s")
    second = route.route_body("orders")
    assert b"h:2" in second and b"h:2" not in first
    route.heartbeat("c1", "h:1", now=2)
    assert route.route_body("orders") is second  # a heartbeat changes no route
    route.connection_closed("s")
    assert b"h:2" not in route.route_body("orders")
    route.delete_topic("orders")
    assert route.route_body("orders") is None and route.route_body("nope") is None
