"""The Raft driver over the in-process transport, on trio's mock clock."""

from __future__ import annotations

import pytest
import trio
from raft_node_harness import Cluster, make_members

from triomq.consensus.node import NotLeader, ProposalFailed


@pytest.fixture
def cluster_of(tmp_path, triomq_plugins, inproc_network_name, nursery):
    def make(ids=(1, 2, 3), **options):
        members = make_members(tmp_path, list(ids), network=inproc_network_name,
                               fsync=False, **options)
        return Cluster(nursery, triomq_plugins, members)

    return make


async def start_all(cluster: Cluster) -> None:
    for node_id in cluster.members:
        if not cluster[node_id].raft_config.join:
            await cluster.start(node_id)


async def test_elect_propose_and_apply_in_order(cluster_of, raft_clock):
    cluster = cluster_of()
    await start_all(cluster)
    leader = await cluster.leader()
    results = [await leader.r.propose(f"c{i}".encode()) for i in range(20)]
    assert [data for _, data in results] == [f"c{i}".encode() for i in range(20)]
    await cluster.until_applied(20)
    histories = {i: m.journal.applied for i, m in cluster.members.items()}
    assert histories[1] == histories[2] == histories[3]
    assert [index for index, _ in histories[1]] == [index for index, _ in results]


async def test_follower_refuses_with_the_leader_address(cluster_of, raft_clock):
    cluster = cluster_of()
    await start_all(cluster)
    leader = await cluster.leader()
    follower = next(m for i, m in cluster.members.items() if i != leader.node_id)
    with pytest.raises(NotLeader) as caught:
        await follower.r.propose(b"x")
    assert caught.value.leader_id == leader.node_id
    assert caught.value.leader_address == f"inproc://n{leader.node_id}"
    with pytest.raises(NotLeader):
        await follower.r.read_index()
    assert await follower.r.wait_leader() == leader.node_id


async def test_apply_error_reaches_the_proposer_only(cluster_of, raft_clock):
    cluster = cluster_of()
    await start_all(cluster)
    leader = await cluster.leader()
    with pytest.raises(ValueError, match="boom"):
        await leader.r.propose(b"boom")
    assert (await leader.r.propose(b"after"))[1] == b"after"
    await cluster.until_applied(1)
    assert all(m.journal.commands == [b"after"] for m in cluster.members.values())


async def test_status_reports_the_configuration(cluster_of, raft_clock):
    cluster = cluster_of()
    await start_all(cluster)
    leader = await cluster.leader()
    await leader.r.propose(b"x")
    status = leader.r.status()
    assert status["role"] == "leader"
    assert status["leader"] == leader.node_id
    assert status["configuration"]["voters"] == [1, 2, 3]
    assert status["applied_index"] == status["commit_index"] >= 5


async def test_killing_the_leader_elects_another_and_keeps_commits(cluster_of, raft_clock):
    cluster = cluster_of()
    await start_all(cluster)
    old = await cluster.leader()
    for i in range(10):
        await old.r.propose(f"a{i}".encode())
    await old.stop()
    new = await cluster.leader()
    assert new.node_id != old.node_id
    await new.r.read_index()  # a read on the new leader sees the old leader's commits
    assert new.journal.commands == [f"a{i}".encode() for i in range(10)]
    for i in range(5):
        await new.r.propose(f"b{i}".encode())
    expected = [f"a{i}".encode() for i in range(10)] + [f"b{i}".encode() for i in range(5)]
    await cluster.until_applied(15)
    survivors = [m for m in cluster.members.values() if m.raft is not None]
    assert all(m.journal.commands == expected for m in survivors)
    await cluster.start(old.node_id)
    await cluster.until_applied(15)
    assert old.journal.commands == expected


@pytest.mark.parametrize("scheme", ["mmap", "lmdb"])
async def test_restart_from_disk_recovers_the_state(cluster_of, raft_clock, scheme):
    cluster = cluster_of(scheme=scheme)
    await start_all(cluster)
    leader = await cluster.leader()
    for i in range(12):
        await leader.r.propose(f"c{i}".encode())
    await cluster.until_applied(12)
    term = leader.r.term
    for member in cluster.members.values():
        await member.stop()
    await start_all(cluster)
    leader = await cluster.leader()
    assert leader.r.term > term
    await leader.r.propose(b"after")
    await cluster.until_applied(13)
    expected = [f"c{i}".encode() for i in range(12)] + [b"after"]
    assert all(m.journal.commands == expected for m in cluster.members.values())


async def test_snapshots_compact_and_catch_up_a_lagging_node(cluster_of, raft_clock):
    cluster = cluster_of(snapshot_entries=5)
    await start_all(cluster)
    leader = await cluster.leader()
    lagging = next(m for i, m in cluster.members.items() if i != leader.node_id)
    await lagging.stop()
    for i in range(30):
        await leader.r.propose(f"c{i}".encode())
    assert leader.r.status()["snapshot_index"] >= 25
    await cluster.start(lagging.node_id)
    await cluster.until_applied(30)
    expected = [f"c{i}".encode() for i in range(30)]
    assert lagging.journal.commands == expected
    assert lagging.r.status()["snapshot_index"] >= 25
    await lagging.stop()  # restart from its installed snapshot
    await cluster.start(lagging.node_id)
    await cluster.until_applied(30)
    assert lagging.journal.commands == expected


async def test_read_index_sees_every_earlier_write(cluster_of, raft_clock):
    cluster = cluster_of()
    await start_all(cluster)
    leader = await cluster.leader()
    for i in range(5):
        await leader.r.propose(f"c{i}".encode())
        await leader.r.read_index()
        assert leader.journal.commands[-1] == f"c{i}".encode()


async def test_propose_nowait_calls_back_once_per_command_in_order(cluster_of, raft_clock):
    cluster = cluster_of()
    await start_all(cluster)
    leader = await cluster.leader()
    outcomes: list[tuple[object, BaseException | None]] = []
    for i in range(30):
        command = b"boom" if i == 7 else f"c{i}".encode()
        leader.r.propose_nowait(command, lambda result, error: outcomes.append((result, error)))
    await cluster.until_applied(29)
    assert len(outcomes) == 30
    errors = [error for _, error in outcomes]
    assert isinstance(errors[7], ValueError) and outcomes[7][0] is None
    assert all(error is None for i, error in enumerate(errors) if i != 7)
    results = [result for i, (result, _) in enumerate(outcomes) if i != 7]
    assert [data for _, data in results] == [f"c{i}".encode() for i in range(30) if i != 7]
    assert [index for index, _ in results] == sorted(index for index, _ in results)
    histories = [m.journal.commands for m in cluster.members.values()]
    assert histories[0] == histories[1] == histories[2]


async def test_propose_nowait_refuses_at_once_on_a_follower(cluster_of, raft_clock):
    cluster = cluster_of()
    await start_all(cluster)
    leader = await cluster.leader()
    follower = next(m for i, m in cluster.members.items() if i != leader.node_id)
    called = []
    with pytest.raises(NotLeader):
        follower.r.propose_nowait(b"x", lambda *outcome: called.append(outcome))
    with pytest.raises(TypeError):
        leader.r.propose_nowait("text", lambda *outcome: called.append(outcome))
    await leader.r.propose(b"after")
    assert called == []


async def test_propose_nowait_copies_a_buffer_and_survives_a_failing_callback(
        cluster_of, raft_clock):
    cluster = cluster_of()
    await start_all(cluster)
    leader = await cluster.leader()
    buffer = bytearray(b"first")

    def broken(result: object, error: BaseException | None) -> None:
        raise RuntimeError("a caller's bug")

    leader.r.propose_nowait(buffer, broken)
    buffer[:] = b"later"
    assert (await leader.r.propose(b"next"))[1] == b"next"
    assert leader.journal.commands == [b"first", b"next"]


async def test_propose_nowait_times_out_through_the_callback(
        cluster_of, raft_clock, inproc_network):
    cluster = cluster_of()
    await start_all(cluster)
    leader = await cluster.leader()
    await leader.r.propose(b"before")
    inproc_network.isolate(f"n{leader.node_id}")
    outcomes: list[BaseException | None] = []
    leader.r.propose_nowait(b"lost", lambda result, error: outcomes.append(error), timeout=1.0)
    with trio.fail_after(30):
        while not outcomes:
            await trio.sleep(0.1)
    assert len(outcomes) == 1
    assert isinstance(outcomes[0], trio.TooSlowError | ProposalFailed)
    await trio.sleep(5)
    assert len(outcomes) == 1  # once only
