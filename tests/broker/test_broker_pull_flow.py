"""The broker's pull flow without an event loop: refusals in RocketMQ's order, the
look-up and its commit, an admin reset, held pulls woken by appends, by their time
and by a role change, all with explicit times and roles."""

from __future__ import annotations

import pytest

from triomq.broker.consume.core.pull import (
    FLAG_COMMIT_OFFSET,
    FLAG_SUBSCRIPTION,
    FLAG_SUSPEND,
    PullAnswer,
)
from triomq.broker.consume.core.pull_flow import (
    BrokerPullFlow,
    BrokerPullSettings,
    CommitOffset,
    Held,
    LookUp,
    PullRole,
    Refuse,
    Respond,
)
from triomq.broker.consume.core.subscription import Subscription
from triomq.protocol.commitlog_layout import tags_code
from triomq.protocol.route import PERM_WRITE, TopicConfig
from triomq.store import QueueEntry

PULL, LITE_PULL = 11, 361
SUCCESS, SYSTEM_BUSY, NO_PERMISSION, TOPIC_NOT_EXIST = 0, 2, 16, 17
PULL_NOT_FOUND, PULL_RETRY_IMMEDIATELY, PULL_OFFSET_MOVED = 19, 20, 21
SUBSCRIPTION_NOT_EXIST, SUBSCRIPTION_GROUP_NOT_EXIST, INVALID_PARAMETER = 24, 26, 29
SIZE = 100  # every record is 100 bytes, back to back from physical offset 0
MASTER = PullRole(is_master=True, master_online=True, confirm_offset=1 << 62)
SLAVE = PullRole(is_master=False, master_online=True, confirm_offset=1 << 62)


class Queue:
    """The commit log of one queue ``orders``/0 (what a pull reads of a store)."""

    def __init__(self, count: int = 0) -> None:
        self.entries: list[QueueEntry] = []
        self.append(count)

    def append(self, count: int) -> None:
        for _ in range(count):
            q = len(self.entries)
            self.entries.append(QueueEntry(q, q * SIZE, SIZE, tags_code(None)))

    @property
    def min_offset(self) -> int:
        return 0

    @property
    def max_offset(self) -> int:
        return len(self.entries) * SIZE

    def queue_min_offset(self, topic: str, queue_id: int) -> int:
        return 0

    def queue_max_offset(self, topic: str, queue_id: int) -> int:
        return len(self.entries) if (topic, queue_id) == ("orders", 0) else 0

    def queue_entries(self, topic: str, queue_id: int, start: int, max_count: int
                      ) -> list[QueueEntry]:
        if (topic, queue_id) != ("orders", 0):
            return []
        return self.entries[start:start + max_count]


class Tables:
    """The broker's tables: one topic, known groups, resets pending by queue."""

    def __init__(self) -> None:
        self.topics = {"orders": TopicConfig("orders", read_queue_nums=4, write_queue_nums=4)}
        self.groups = {"cg"}
        self.subscriptions: dict[tuple[str, str], Subscription] = {}
        self.resets: dict[tuple[str, str, int], int] = {}

    def topic(self, name: str) -> TopicConfig | None:
        return self.topics.get(name)

    def group_known(self, group: str) -> bool:
        return group in self.groups

    def registered(self, group: str, topic: str) -> Subscription | None:
        return self.subscriptions.get((group, topic))

    def take_reset(self, group: str, topic: str, queue_id: int) -> int | None:
        return self.resets.pop((group, topic, queue_id), None)


def fields(offset: int, *, flags: int = FLAG_SUBSCRIPTION, commit: int = 0,
           suspend_ms: int = 15_000, **extra: str) -> dict[str, str]:
    header = {"consumerGroup": "cg", "topic": "orders", "queueId": "0",
              "queueOffset": str(offset), "maxMsgNums": "32", "sysFlag": str(flags),
              "commitOffset": str(commit), "suspendTimeoutMillis": str(suspend_ms),
              "subscription": "*", "subVersion": "0", "expressionType": "TAG"}
    header.update(extra)
    return header


def flow(tables: Tables | None = None, **settings) -> BrokerPullFlow[str]:
    settings.setdefault("millis_per_unit", 1000)  # times below are in seconds
    return BrokerPullFlow(BrokerPullSettings("broker-a", **settings), tables or Tables())


def run(f: BrokerPullFlow[str], effect, store: Queue, now: float) -> list:
    """Carry out a look-up as a driver does: its answer back into the flow."""
    assert isinstance(effect, LookUp)
    return f.looked_up(effect, effect.run(store), now)


def answered(effects: list) -> PullAnswer:
    (answer,) = [e for e in effects if isinstance(e, Respond)]
    return answer.answer


def test_a_pull_is_looked_up_answered_and_commits_its_offset() -> None:
    f, store = flow(), Queue(5)
    lookup = f.receive("p1", PULL, fields(2, flags=FLAG_SUBSCRIPTION | FLAG_COMMIT_OFFSET,
                                          commit=2), 0.0, MASTER)
    assert isinstance(lookup, LookUp) and lookup.first and lookup.pull == "p1"
    effects = run(f, lookup, store, 0.0)
    assert effects[0] == CommitOffset("cg", "orders", 0, 2)
    answer = answered(effects)
    assert answer.code == SUCCESS and answer.ranges == tuple((q * SIZE, SIZE) for q in (2, 3, 4))
    assert answer.fields["nextBeginOffset"] == "5" and answer.fields["maxOffset"] == "5"
    # The lite pull consumer's request is the same pull.
    assert answered(run(f, f.receive("p2", LITE_PULL, fields(4), 0.0, MASTER), store,
                        0.0)).ranges == ((400, SIZE),)


def test_refusals_come_before_the_store_in_rocketmqs_order() -> None:
    tables = Tables()
    f = flow(tables, lite_pull_message_enable=False)
    lite = f.receive("p", LITE_PULL, fields(0), 0.0, MASTER)
    assert isinstance(lite, Refuse) and lite.code == NO_PERMISSION
    assert "lite_pull_message_enable" in lite.remark
    bad = f.receive("p", PULL, fields(0, queueOffset="x"), 0.0, MASTER)
    assert isinstance(bad, Refuse) and bad.code == INVALID_PARAMETER
    assert "queueOffset" in bad.remark
    busy = f.receive("p", PULL, fields(0), 0.0, SLAVE)
    assert isinstance(busy, Refuse) and busy.code == SYSTEM_BUSY
    assert "slave_read_enable" in busy.remark
    # A slave whose group has no master serves the pull.
    alone = PullRole(is_master=False, master_online=False, confirm_offset=1 << 62)
    assert isinstance(f.receive("p", PULL, fields(0), 0.0, alone), LookUp)
    tables.resets[("other", "orders", 0)] = 3
    unknown_group = f.receive("p", PULL, fields(0, consumerGroup="other"), 0.0, MASTER)
    assert isinstance(unknown_group, Refuse)
    assert unknown_group.code == SUBSCRIPTION_GROUP_NOT_EXIST
    assert tables.resets == {("other", "orders", 0): 3}  # a refused pull takes no reset
    no_topic = f.receive("p", PULL, fields(0, topic="nope"), 0.0, MASTER)
    assert isinstance(no_topic, Refuse) and no_topic.code == TOPIC_NOT_EXIST
    tables.topics["orders"] = TopicConfig("orders", 4, 4, perm=PERM_WRITE)
    unreadable = f.receive("p", PULL, fields(0), 0.0, MASTER)
    assert isinstance(unreadable, Refuse) and unreadable.code == NO_PERMISSION
    tables.topics["orders"] = TopicConfig("orders", 4, 4)
    no_subscription = f.receive("p", PULL, fields(0, flags=0), 0.0, MASTER)
    assert isinstance(no_subscription, Refuse)
    assert no_subscription.code == SUBSCRIPTION_NOT_EXIST
    # One registered by heartbeat is used by a pull carrying none.
    tables.subscriptions[("cg", "orders")] = Subscription()
    assert isinstance(f.receive("p", PULL, fields(0, flags=0), 0.0, MASTER), LookUp)


def test_a_slave_with_slave_read_enable_serves_and_points_back_at_the_master() -> None:
    f, store = flow(slave_read_enable=True), Queue(3)
    assert answered(run(f, f.receive("p", PULL, fields(1), 0.0, SLAVE), store, 0.0)).code \
        == SUCCESS
    behind = answered(run(f, f.receive("p", PULL, fields(5), 0.0, SLAVE), store, 0.0))
    assert behind.code == PULL_RETRY_IMMEDIATELY and behind.fields["suggestWhichBrokerId"] == "0"


def test_the_first_pull_after_an_admin_reset_is_moved_to_the_reset_offset() -> None:
    tables = Tables()
    tables.resets[("cg", "orders", 0)] = 1
    f, store = flow(tables), Queue(5)
    lookup = f.receive("p", PULL, fields(4, flags=FLAG_SUBSCRIPTION | FLAG_COMMIT_OFFSET
                                         | FLAG_SUSPEND, commit=4), 0.0, MASTER)
    assert isinstance(lookup, LookUp) and lookup.reset_offset == 1
    effects = run(f, lookup, store, 0.0)
    assert not any(isinstance(e, CommitOffset | Held) for e in effects)  # its commit flag ignored
    answer = answered(effects)
    assert (answer.code, answer.remark, answer.ranges) == (PULL_OFFSET_MOVED, "OFFSET_RESET", ())
    assert answer.fields["nextBeginOffset"] == "1" and answer.fields["maxOffset"] == "5"
    # Taken: the group's next pull of the queue is looked up as any.
    again = f.receive("p", PULL, fields(4), 0.0, MASTER)
    assert isinstance(again, LookUp) and again.reset_offset is None


def test_a_held_pull_is_answered_when_its_queue_grows() -> None:
    f, store = flow(), Queue(2)
    effects = run(f, f.receive("p", PULL, fields(2, flags=FLAG_SUBSCRIPTION | FLAG_SUSPEND
                                                 | FLAG_COMMIT_OFFSET, commit=2,
                                                 suspend_ms=15_000), 10.0, MASTER), store, 10.0)
    assert effects == [CommitOffset("cg", "orders", 0, 2), Held("p", "orders", 0, 2, 25.0)]
    assert len(f.holds) == 1 and f.next_deadline() == 25.0
    assert f.appended(store, MASTER) == [] and f.timer(24.9, MASTER) == []
    store.append(1)
    (lookup,) = f.appended(store, MASTER)
    assert lookup.pull == "p" and not lookup.first
    effects = run(f, lookup, store, 11.0)
    assert len(effects) == 1  # no second commit
    assert answered(effects).ranges == ((200, SIZE),)
    assert len(f.holds) == 0 and f.next_deadline() is None


def test_a_held_pull_grows_only_as_far_as_the_confirm_offset() -> None:
    f, store = flow(), Queue(2)
    run(f, f.receive("p", PULL, fields(2, flags=FLAG_SUBSCRIPTION | FLAG_SUSPEND), 0.0,
                     MASTER), store, 0.0)
    store.append(2)
    unconfirmed = PullRole(is_master=True, master_online=True, confirm_offset=2 * SIZE)
    assert f.appended(store, unconfirmed) == []
    confirmed = PullRole(is_master=True, master_online=True, confirm_offset=3 * SIZE)
    (lookup,) = f.appended(store, confirmed)
    assert answered(run(f, lookup, store, 1.0)).ranges == ((200, SIZE),)


@pytest.mark.parametrize(("long_polling", "deadline"), [(True, 5.0), (False, 1.5)])
def test_a_held_pull_whose_time_runs_out_is_answered_not_found(long_polling: bool,
                                                                deadline: float) -> None:
    f, store = flow(long_polling_enable=long_polling, short_polling_time_mills=500), Queue(2)
    (held,) = run(f, f.receive("p", PULL, fields(2, flags=FLAG_SUBSCRIPTION | FLAG_SUSPEND,
                                                 suspend_ms=4_000), 1.0, MASTER), store, 1.0)
    assert isinstance(held, Held) and held.deadline == deadline
    assert f.timer(deadline - 0.01, MASTER) == []
    (lookup,) = f.timer(deadline, MASTER)
    effects = run(f, lookup, store, deadline)
    answer = answered(effects)  # answered, not held again
    assert answer.code == PULL_NOT_FOUND and answer.fields["nextBeginOffset"] == "2"


def test_a_role_change_answers_every_held_pull_with_the_new_role() -> None:
    f, store = flow(), Queue(2)
    for pull in ("p1", "p2"):
        run(f, f.receive(pull, PULL, fields(2, flags=FLAG_SUBSCRIPTION | FLAG_SUSPEND), 0.0,
                         MASTER), store, 0.0)
    lookups = f.role_changed(SLAVE)
    assert [lookup.pull for lookup in lookups] == ["p1", "p2"] and len(f.holds) == 0
    answer = answered(run(f, lookups[0], store, 1.0))
    # On a slave whose group has a master: back to the master.
    assert answer.code == PULL_RETRY_IMMEDIATELY and answer.fields["suggestWhichBrokerId"] == "0"


def test_a_pull_whose_consumer_went_away_is_held_no_longer() -> None:
    f, store = flow(), Queue(2)
    run(f, f.receive("p", PULL, fields(2, flags=FLAG_SUBSCRIPTION | FLAG_SUSPEND), 0.0,
                     MASTER), store, 0.0)
    f.gone("p")
    f.gone("p")  # twice is no error
    store.append(1)
    assert len(f.holds) == 0 and f.appended(store, MASTER) == [] and f.timer(99.0, MASTER) == []


def test_a_request_that_is_no_pull_is_a_driver_error() -> None:
    with pytest.raises(ValueError, match="not a pull"):
        flow().receive("p", 10, fields(0), 0.0, MASTER)
