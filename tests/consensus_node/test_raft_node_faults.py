"""The Raft driver under partitions, membership changes, transfers and bad peers."""

from __future__ import annotations

import random

import pytest
import trio
from raft_node_harness import Cluster, make_members

from triomq.consensus.core import codec
from triomq.consensus.core.confchange import ConfChangeSingle, ConfChangeType, ConfChangeV2
from triomq.consensus.core.log import Entry
from triomq.consensus.core.messages import HeartbeatRequest, PushRequest, PushType, VoteRequest
from triomq.consensus.node import RAFT_REQUEST_CODES, NotLeader, ProposalFailed
from triomq.rpc import open_rpc_client


@pytest.fixture
def cluster_of(tmp_path, triomq_plugins, inproc_network_name, nursery):
    def make(ids=(1, 2, 3), extra=None, **options):
        members = make_members(tmp_path, list(ids), network=inproc_network_name,
                               extra=extra, fsync=False, **options)
        return Cluster(nursery, triomq_plugins, members)

    return make


async def start(cluster: Cluster, ids=(1, 2, 3)) -> None:
    for node_id in ids:
        await cluster.start(node_id)


def change(kind: ConfChangeType, node_id: int) -> ConfChangeV2:
    return ConfChangeV2([ConfChangeSingle(kind, node_id)])


async def test_partitioned_leader_fails_proposals_and_steps_down(
        cluster_of, raft_clock, inproc_network):
    cluster = cluster_of()
    await start(cluster)
    old = await cluster.leader()
    await old.r.propose(b"before")
    inproc_network.isolate(f"n{old.node_id}")
    with pytest.raises((ProposalFailed, trio.TooSlowError)):
        await old.r.propose(b"lost", timeout=5.0)
    others = {i for i in cluster.members if i != old.node_id}
    new = await cluster.leader(among=others)
    with trio.fail_after(5):
        while old.r.is_leader:
            await trio.sleep(0.05)
    with pytest.raises(NotLeader):
        await old.r.read_index()
    await new.r.propose(b"after")
    inproc_network.heal()
    await cluster.until_applied(2)
    await cluster.leader()
    assert all(m.journal.commands == [b"before", b"after"] for m in cluster.members.values())


async def test_add_a_learner_promote_it_then_remove_nodes(cluster_of, raft_clock):
    cluster = cluster_of(extra=[4])
    await start(cluster, (1, 2, 3, 4))
    leader = await cluster.leader(among={1, 2, 3})
    for i in range(5):
        await leader.r.propose(f"c{i}".encode())
    await leader.r.change_membership(change(ConfChangeType.ADD_LEARNER_NODE, 4))
    await cluster.until_applied(5, {4})
    assert leader.r.status()["configuration"]["learners"] == [4]
    await leader.r.change_membership(change(ConfChangeType.ADD_NODE, 4))
    assert leader.r.status()["configuration"]["voters"] == [1, 2, 3, 4]
    await leader.r.propose(b"four voters")
    follower = next(i for i in (1, 2, 3) if i != leader.node_id)
    await leader.r.change_membership(change(ConfChangeType.REMOVE_NODE, follower))
    await cluster[follower].stop()
    await leader.r.propose(b"three again")
    # Removing the leader itself: it steps down and the others elect one.
    await leader.r.change_membership(change(ConfChangeType.REMOVE_NODE, leader.node_id))
    remaining = {1, 2, 3, 4} - {follower, leader.node_id}
    new = await cluster.leader(among=remaining)
    assert new.r.status()["configuration"]["voters"] == sorted(remaining)
    await new.r.propose(b"two left")
    await cluster.until_applied(8, remaining)
    expected = [f"c{i}".encode() for i in range(5)] + [b"four voters", b"three again",
                                                       b"two left"]
    assert all(cluster[i].journal.commands == expected for i in remaining)


async def test_refused_membership_change(cluster_of, raft_clock):
    cluster = cluster_of()
    await start(cluster)
    leader = await cluster.leader()
    with pytest.raises(ProposalFailed) as caught:
        await leader.r.change_membership(ConfChangeV2())  # leaving a non-joint config
    assert caught.value.code.name == "UNEXPECTED_ARGUMENT"


async def test_leadership_transfer(cluster_of, raft_clock):
    cluster = cluster_of()
    await start(cluster)
    leader = await cluster.leader()
    await leader.r.propose(b"x")
    target = next(i for i in cluster.members if i != leader.node_id)
    await leader.r.transfer_leadership(target)
    assert (await cluster.leader()).node_id == target
    assert not leader.r.is_leader
    await cluster[target].r.propose(b"y")
    await cluster.until_applied(2)
    with pytest.raises(ProposalFailed):
        await cluster[target].r.transfer_leadership(99)


def _garbage(rng: random.Random) -> tuple[int, bytes]:
    valid = [
        codec.encode(VoteRequest(src=1, dst=2, term=9, last_index=3, last_term=2)),
        codec.encode(HeartbeatRequest(src=1, dst=2, term=1, commit_index=1)),
        codec.encode(PushRequest(src=1, dst=2, term=1, type=PushType.APPEND, index=4,
                                 commit_index=0, entries=(Entry(4, 1, b"data"),))),
    ]
    body = bytearray(rng.choice(valid))
    how = rng.randrange(3)
    if how == 0:
        del body[rng.randrange(len(body)):]
    elif how == 1:
        body += rng.randbytes(rng.randint(1, 8))
    else:
        body[0] = rng.choice([0, 10, 255])
    return rng.choice(RAFT_REQUEST_CODES), bytes(body)


async def test_malformed_requests_close_the_connection_only(cluster_of, raft_clock):
    cluster = cluster_of()
    await start(cluster)
    leader = await cluster.leader()
    victim = next(m for i, m in cluster.members.items() if i != leader.node_id)
    address = f"inproc://n{victim.node_id}"
    rng = random.Random(7)
    bodies = [_garbage(rng) for _ in range(20)]
    # A well-formed message under the wrong request code is refused too.
    vote = codec.encode(VoteRequest(src=1, dst=2, term=1, last_index=0, last_term=0))
    bodies.append((codec.PUSH, vote))
    for code, body in bodies:
        async with open_rpc_client(leader.node.connect) as rpc:
            connection = await rpc.connection(address)
            await connection.invoke_oneway(code, body=body)
            with trio.fail_after(5):
                while not connection.closed:
                    await trio.sleep(0.1)
    with trio.fail_after(5):
        while victim.r.malformed_frames < len(bodies):
            await trio.sleep(0.05)
    await leader.r.propose(b"still fine")
    await cluster.until_applied(1)
    assert victim.journal.commands == [b"still fine"]


async def test_garbage_bytes_close_the_connection_only(cluster_of, raft_clock):
    cluster = cluster_of()
    await start(cluster)
    leader = await cluster.leader()
    victim = next(m for i, m in cluster.members.items() if i != leader.node_id)
    stream = await leader.node.connect(f"inproc://n{victim.node_id}")
    await stream.send_all(b"\x00\x00\x00\x08\xff\xff\xff\xffgarbage!")
    with trio.fail_after(5):
        assert await stream.receive_some() == b""  # the server hung up
    await stream.aclose()
    assert (await leader.r.propose(b"still fine"))[1] == b"still fine"
    await cluster.until_applied(1)
    assert victim.journal.commands == [b"still fine"]


async def test_joint_change_swaps_a_voter_and_leaves_by_itself(cluster_of, raft_clock):
    cluster = cluster_of(extra=[4])
    await start(cluster, (1, 2, 3, 4))
    leader = await cluster.leader(among={1, 2, 3})
    await leader.r.propose(b"before")
    gone = next(i for i in (1, 2, 3) if i != leader.node_id)
    swap = ConfChangeV2([ConfChangeSingle(ConfChangeType.ADD_NODE, 4),
                         ConfChangeSingle(ConfChangeType.REMOVE_NODE, gone)])
    await leader.r.change_membership(swap)
    with trio.fail_after(10):
        while leader.r.status()["configuration"]["voters_outgoing"]:
            await trio.sleep(0.1)
    voters = sorted({1, 2, 3, 4} - {gone})
    assert leader.r.status()["configuration"]["voters"] == voters
    await cluster[gone].stop()
    await leader.r.propose(b"after")
    await cluster.until_applied(2, set(voters))
    assert all(cluster[i].journal.commands == [b"before", b"after"] for i in voters)
