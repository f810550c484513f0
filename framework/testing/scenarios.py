"""Failover scenarios written once, run by the simulation and by a real cluster.

A ``Scenario`` is a short script of steps (start, put, pull, kill the master, cut
it from the controllers, kill the controller leader during an election,
turn unclean election on, wait for a master...) and, for the steps that
observe something, the outcome expected (``SCENARIOS`` at the end).
``triomq.testing.scenario_run.ScenarioRun`` interprets one script without
doing any I/O or reading any clock: a pump feeds it a
``ClusterSnapshot`` of the cluster (and the answer of the last action) and carries
out what it asks for next: an ``Action`` on the cluster, ``Advance`` (let
time pass, then show a new snapshot) or ``Done``. Two pumps run every
scenario: one over the deterministic ``triomq.testing.clustersim``
(virtual time) and one over real nodes of ``triomq.testing.cluster`` (trio,
in-process transport). Both must report the outcomes the script expects,
which is how the simulation is known to test the code that ships.

Outcomes name brokers by the part they play, not by name, because which
replica wins an election may differ between the two: ``master`` (the master
when the group settled), ``old master`` (the one a fault hit), ``new master``
(the one elected after it), ``lagging`` (a slave cut from the master),
``replica`` (any other). Epochs are counted from the one the fault hit
(``epoch +1``). Waits have liveness bounds, never timing assertions: a
bound passed only shows as an outcome that differs.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from triomq.client.core.message import decode_messages
from triomq.protocol.response_codes import ResponseCode

# -- what a pump shows ------------------------------------------------------------------


@attrs.frozen
class BrokerView:
    """One broker replica as its pump sees it."""

    name: str
    up: bool
    #: "master", "slave" or "none" (down, or between roles).
    role: str = "none"
    #: The epoch of the master it is or follows (-1 without a role).
    epoch: int = -1
    max_offset: int = 0
    #: The SyncStateSet a master counts acks over (broker names; empty unless master).
    in_sync: frozenset[str] = frozenset()
    #: How many acknowledged messages it does not hold.
    missing: int = 0


@attrs.frozen
class ClusterSnapshot:
    """The cluster at one moment: the brokers and the controllers' committed state."""

    now_ms: int
    brokers: Mapping[str, BrokerView]
    #: The committed master (broker name; None: no master) and epochs.
    master: str | None = None
    master_epoch: int = 0
    sync_state_set: frozenset[str] = frozenset()
    #: The master epoch applied by each running controller.
    controller_epochs: tuple[int, ...] = ()
    #: Master epochs whose election the controllers reported as a possible message loss.
    loss_reported: frozenset[int] = frozenset()
    #: Whether the controller leader was killed during an election (``KillLeaderAtElection``).
    leader_killed: bool = False
    #: The bodies of the messages acknowledged so far, and how many queues of the
    #: scenario's topic the puts spread over.
    acked: frozenset[bytes] = frozenset()
    queues: int = 1

    def serving_master(self) -> str | None:
        """The committed master when it runs as master of the committed epoch."""
        view = self.brokers.get(self.master or "")
        if view is not None and view.up and view.role == "master" and \
                view.epoch == self.master_epoch:
            return view.name
        return None


# -- what a pump does ----------------------------------------------------------------------


@attrs.frozen
class StartControllers:
    """Start every controller."""


@attrs.frozen
class StartBroker:
    """Start (or restart, with its data) broker ``name``."""

    name: str


@attrs.frozen
class KillBroker:
    """Kill broker ``name``; it stays down."""

    name: str


@attrs.frozen
class CutFromControllers:
    """Cut broker ``name`` from every controller (clients and brokers still reach it)."""

    name: str


@attrs.frozen
class CutReplication:
    """Cut the replication (HA) links between broker ``name`` and every other broker
    (also those not started yet); their requests to each other still pass."""

    name: str


@attrs.frozen
class Heal:
    """Restore every cut link."""


@attrs.frozen
class SetUncleanElection:
    """Set every running controller's ``enable_elect_unclean_master``."""

    enabled: bool


@attrs.frozen
class ArmLeaderKill:
    """Kill the controller leader once it proposes the next election (it stays down)."""


@attrs.frozen
class PutOne:
    """Put one message synchronously on broker ``name``; the answer is the broker's
    response code name (``SUCCESS``, ``FLUSH_SLAVE_TIMEOUT``, ``SERVICE_NOT_AVAILABLE``...)
    or ``NO_ANSWER``. An acknowledged message is counted in ``BrokerView.missing``."""

    name: str


@attrs.frozen
class PullOne:
    """PULL_MESSAGE of queue ``queue_id`` of the scenario's topic from ``offset`` on broker
    ``name``, answered at once (no suspend, the subscription ``*`` sent with it, as a
    consumer without a stored offset); the answer is a ``Pulled``."""

    name: str
    queue_id: int
    offset: int


@attrs.frozen
class Pulled:
    """A pull's answer: the broker's response code name (``SUCCESS``, ``PULL_NOT_FOUND``,
    ``PULL_OFFSET_MOVED``, ``SERVICE_NOT_AVAILABLE``... or ``NO_ANSWER``), the offset to
    pull from next and the bodies of the messages it served."""

    code: str
    next_offset: int = 0
    bodies: tuple[bytes, ...] = ()

    @classmethod
    def of(cls, code: int, fields: Mapping[str, str], body: bytes) -> Pulled:
        """The ``Pulled`` of a PULL_MESSAGE response (code, extFields, body)."""
        name = ResponseCode(code).name if code in set(ResponseCode) else str(code)
        if code != ResponseCode.SUCCESS:
            return cls(name)
        return cls(name, int(fields.get("nextBeginOffset", "0")),
                   tuple(m.body for m in decode_messages(body)))


Action = (StartControllers | StartBroker | KillBroker | CutFromControllers | CutReplication
          | Heal | SetUncleanElection | ArmLeaderKill | PutOne | PullOne)


@attrs.frozen
class Advance:
    """Let a little time pass, then show a new snapshot."""


@attrs.frozen
class Done:
    """The script ended."""


Command = Action | Advance | Done


# -- the steps of a script -----------------------------------------------------------------


@attrs.frozen
class Start:
    """Start the controllers (first time) and ``brokers`` (all: empty); wait for a master
    and for every started broker in its SyncStateSet. Outcome: the epoch and the set."""

    brokers: tuple[str, ...] = ()
    expect: str | None = None


@attrs.frozen
class Launch:
    """Start broker ``who`` (a name, or a part: ``old master`` comes back)."""

    who: str


@attrs.frozen
class Put:
    """``count`` synchronous puts on ``on`` (the serving master by default).
    Outcome: how many answered each code, e.g. ``10 SUCCESS``."""

    count: int
    on: str = "master"
    expect: str | None = None


@attrs.frozen
class KillMaster:
    """Kill the serving master (now the ``old master``)."""


@attrs.frozen
class CutMasterFromControllers:
    """Cut the serving master (now the ``old master``) from the controllers only."""


@attrs.frozen
class CutSlaveReplication:
    """Cut a slave (now ``lagging``) from replicating."""


@attrs.frozen
class CutReplicationOf:
    """Cut broker ``who``'s replication links with the other brokers."""

    who: str


@attrs.frozen
class HealAll:
    """Restore every link."""


@attrs.frozen
class UncleanElection:
    """Turn unclean election on or off at every controller."""

    enabled: bool


@attrs.frozen
class KillLeaderAtElection:
    """Kill the controller leader as soon as it proposes the next election."""


@attrs.frozen
class Settle:
    """Let ``ms`` pass (room for something that must not happen)."""

    ms: int


@attrs.frozen
class WaitMaster:
    """Wait for a master of a newer epoch than the fault's. Outcome: where it came from
    (the SyncStateSet at the fault, or outside it), its epoch, a reported loss."""

    expect: str | None = None


@attrs.frozen
class WaitNewEpoch:
    """Wait until the committed master epoch is past the fault's. Outcome: the committed
    master (or none) and its epoch."""

    expect: str | None = None


@attrs.frozen
class WaitRole:
    """Wait until ``who`` has ``role`` in the committed epoch. Outcome: its role and epoch."""

    who: str
    role: str
    expect: str | None = None


@attrs.frozen
class ExpectRole:
    """Outcome: the role and epoch ``who`` holds now."""

    who: str
    expect: str | None = None


@attrs.frozen
class WaitSyncStateSet:
    """Wait until the committed SyncStateSet, and the master's own, are ``members`` (parts).
    Outcome: the committed set."""

    members: tuple[str, ...]
    expect: str | None = None


@attrs.frozen
class ExpectElectedOnce:
    """Outcome: whether the controller leader was killed, the master epochs the running
    controllers and brokers hold, how many brokers act as master."""

    expect: str | None = None


@attrs.frozen
class PullAll:
    """Pull every queue of the topic from ``on`` (a part or a broker name) from offset 0
    to its end, as a new consumer group does. Outcome: the acknowledged messages it
    served (``every acknowledged message``, or ``N of M``), and any served twice."""

    on: str = "master"
    expect: str | None = None


@attrs.frozen
class CheckAcked:
    """Wait until the SyncStateSet members caught up with the master. Outcome: the
    acknowledged messages the master and the members lack (``none``)."""

    expect: str | None = None


Step = (Start | Launch | Put | KillMaster | CutMasterFromControllers
        | CutSlaveReplication | CutReplicationOf | HealAll | UncleanElection
        | KillLeaderAtElection | Settle | WaitMaster | WaitNewEpoch | WaitRole | ExpectRole
        | WaitSyncStateSet | ExpectElectedOnce | PullAll | CheckAcked)


@attrs.frozen
class Scenario:
    """A named script over a group of ``replicas`` brokers ``b1``..``bN``."""

    name: str
    replicas: int
    steps: tuple[Step, ...]

    def expected(self) -> list[tuple[int, str]]:
        """(step index, outcome) of every step that expects one."""
        return [(i, expect) for i, step in enumerate(self.steps)
                if (expect := getattr(step, "expect", None)) is not None]


# -- the scenarios -------------------------------------------------------------------------

_SETTLED_3 = "master of epoch +1, SyncStateSet (master, replica, replica)"
_NONE_LACKING = "acknowledged messages lacking: none"
_FROM_SET = "new master from the SyncStateSet, epoch +1"

SCENARIOS: tuple[Scenario, ...] = (
    Scenario("master killed", 3, (
        Start(expect=_SETTLED_3),
        Put(10, expect="10 SUCCESS"),
        KillMaster(),
        Put(1, on="old master", expect="1 NO_ANSWER"),
        WaitMaster(expect=_FROM_SET),
        Put(5, expect="5 SUCCESS"),
        WaitSyncStateSet(("new master", "replica"),
                         expect="SyncStateSet (new master, replica)"),
        PullAll(expect="master serves every acknowledged message"),
        CheckAcked(expect=_NONE_LACKING),
    )),
    Scenario("master cut off from the controllers, not from its clients", 3, (
        Start(expect=_SETTLED_3),
        Put(10, expect="10 SUCCESS"),
        CutMasterFromControllers(),
        WaitMaster(expect=_FROM_SET),
        # It has not heard of the election, and cannot shrink its SyncStateSet
        # without the controllers: it stores a put and never acknowledges it.
        ExpectRole("old master", expect="old master: master of epoch +0"),
        Put(1, on="old master", expect="1 FLUSH_SLAVE_TIMEOUT"),
        Put(5, expect="5 SUCCESS"),
        HealAll(),
        WaitRole("old master", "slave", expect="old master: slave of epoch +1"),
        WaitSyncStateSet(("new master", "old master", "replica"),
                         expect="SyncStateSet (new master, old master, replica)"),
        PullAll(expect="master serves every acknowledged message"),
        CheckAcked(expect=_NONE_LACKING),
    )),
    Scenario("controller leader killed during an election", 3, (
        Start(expect=_SETTLED_3),
        Put(10, expect="10 SUCCESS"),
        KillLeaderAtElection(),
        KillMaster(),
        WaitMaster(expect=_FROM_SET),
        Settle(1500),  # room for a second election, which must not happen
        ExpectElectedOnce(expect="leader killed, 2 controllers at epoch +1; "
                                 "brokers at epoch +1; 1 master"),
        Put(5, expect="5 SUCCESS"),
        PullAll(expect="master serves every acknowledged message"),
        CheckAcked(expect=_NONE_LACKING),
    )),
    Scenario("unclean election off, then on", 2, (
        Start(("b1",), expect="master of epoch +1, SyncStateSet (master)"),
        CutReplicationOf("b1"),
        Launch("b2"),
        WaitRole("b2", "slave", expect="b2: slave of epoch +1"),
        Put(5, expect="5 SUCCESS"),  # acknowledged by b1 alone, its SyncStateSet
        KillMaster(),
        # Off: the only in-sync replica is dead; the controllers fence its epoch
        # and elect nobody.
        WaitNewEpoch(expect="no master, epoch +1"),
        Put(1, on="b2", expect="1 SERVICE_NOT_AVAILABLE"),
        Settle(1000),  # room for an election, which must not happen
        WaitNewEpoch(expect="no master, epoch +1"),
        UncleanElection(True),
        WaitMaster(expect="new master from outside the SyncStateSet, epoch +2, "
                          "possible message loss reported"),
        Put(3, expect="3 SUCCESS"),
        # Consumers of the new master find the 3 it took and never the 5 it lacks.
        PullAll(expect="master serves 3 of 8 acknowledged messages"),
        CheckAcked(expect="acknowledged messages lacking: new master lacks 5"),
    )),
    Scenario("a group of two replicas", 2, (
        Start(expect="master of epoch +1, SyncStateSet (master, replica)"),
        Put(10, expect="10 SUCCESS"),
        KillMaster(),
        WaitMaster(expect=_FROM_SET),
        WaitSyncStateSet(("new master",), expect="SyncStateSet (new master)"),
        Put(5, expect="5 SUCCESS"),  # acknowledged by the survivor alone
        Launch("old master"),
        WaitRole("old master", "slave", expect="old master: slave of epoch +1"),
        Put(1, on="old master", expect="1 SERVICE_NOT_AVAILABLE"),
        WaitSyncStateSet(("new master", "old master"),
                         expect="SyncStateSet (new master, old master)"),
        PullAll(expect="master serves every acknowledged message"),
        CheckAcked(expect=_NONE_LACKING),
    )),
    Scenario("a lagging slave shrunk out of the SyncStateSet, then expanded back", 3, (
        Start(expect=_SETTLED_3),
        Put(5, expect="5 SUCCESS"),
        CutSlaveReplication(),
        # A slave that holds the whole log is caught up, cut or not: it lags from the
        # first put it cannot receive, which outwaits its 1 s timeout (the slave has
        # 2 s to catch up).
        Put(1, expect="1 FLUSH_SLAVE_TIMEOUT"),
        WaitSyncStateSet(("master", "replica"), expect="SyncStateSet (master, replica)"),
        Put(5, expect="5 SUCCESS"),
        HealAll(),
        WaitSyncStateSet(("lagging", "master", "replica"),
                         expect="SyncStateSet (lagging, master, replica)"),
        PullAll(expect="master serves every acknowledged message"),
        CheckAcked(expect=_NONE_LACKING),
    )),
)
