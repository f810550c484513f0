"""The producer against name servers and brokers: routes, sends of every kind, retries, failover."""

from __future__ import annotations

import contextlib

import pytest
import trio
from client_cluster import open_groups, start_replicated_topic

from triomq.broker.service import broker_of
from triomq.client.core.errors import BrokerError, NoRouteError
from triomq.client.core.message import Message, MessageQueue, SendStatus
from triomq.client.producer import Producer
from triomq.rpc import RpcError
from triomq.testing.cluster import open_cluster


def stored(groups, node: str, topic: str) -> list:
    return [r for r in broker_of(groups.cluster.node(node)).log.iter_records()
            if r.topic == topic]


@pytest.mark.parametrize("transport", ["inproc", "tcp"])
async def test_sends_go_round_robin_over_both_groups_with_ids_tags_and_keys(
        tmp_path, transport) -> None:
    async with open_groups(tmp_path, transport, groups=2) as groups:
        await groups.create_topic("orders", queues=2)
        app = await groups.client()
        producer = Producer("pg", groups.namesrv)
        async with producer.start(app.connect):
            queues = await producer.fetch_publish_message_queues("orders")
            assert sorted(queues) == [MessageQueue("orders", g, i)
                                      for g in ("broker-a", "broker-b") for i in (0, 1)]
            results = [await producer.send(Message("orders", f"m{n}".encode(), tags="new",
                                                   keys=[f"k{n}", "all"],
                                                   properties={"p": str(n)}))
                       for n in range(8)]
        assert all(r.send_status is SendStatus.SEND_OK for r in results)
        assert len({r.msg_id for r in results}) == 8
        # Round robin: every queue twice, at queue offsets 0 then 1.
        assert sorted((r.message_queue, r.queue_offset) for r in results) == sorted(
            (q, o) for q in queues for o in (0, 1))
        records = stored(groups, "a", "orders") + stored(groups, "b", "orders")
        assert len(records) == 8
        by_id = {r.properties["UNIQ_KEY"]: r for r in records}
        first = by_id[results[0].msg_id]
        assert first.body == b"m0" and first.properties["TAGS"] == "new"
        assert first.properties["KEYS"] == "k0 all" and first.properties["p"] == "0"
        assert first.born_timestamp > 1_600_000_000_000


async def test_async_oneway_and_explicit_queue_sends(tmp_path) -> None:
    async with open_groups(tmp_path) as groups:
        await groups.create_topic("orders")
        app = await groups.client()
        producer = Producer("pg", groups.namesrv)
        done: list = []
        async with producer.start(app.connect):
            queue = MessageQueue("orders", "broker-a", 3)
            result = await producer.send(Message("orders", b"q3"), queue)
            assert result.message_queue == queue and result.queue_offset == 0
            producer.send_async(Message("orders", b"async"), on_success=done.append)
            producer.send_async(Message("orders", b"x"), on_exception=done.append,
                                queue=MessageQueue("orders", "broker-z", 0))
            await producer.send_oneway(Message("orders", b"oneway"), queue)
        # The block waited for the async sends.
        assert any(getattr(d, "send_status", None) is SendStatus.SEND_OK for d in done)
        assert any(isinstance(d, NoRouteError) for d in done)
        with trio.fail_after(10):
            while len(stored(groups, "a", "orders")) < 3:
                await trio.sleep(0.01)
        assert {r.body for r in stored(groups, "a", "orders")} == {b"q3", b"async", b"oneway"}


async def test_an_unknown_topic_is_created_by_its_first_send(tmp_path) -> None:
    async with open_groups(tmp_path, groups=2) as groups:
        app = await groups.client("admin")
        await groups.wait_routed("TBW102", {"broker-a", "broker-b"})
        producer = Producer("pg", groups.namesrv)
        async with producer.start(app.connect):
            # No route yet: the default topic's, four queues per group.
            assert len(await producer.fetch_publish_message_queues("fresh")) == 8
            first = await producer.send(Message("fresh", b"x"))
            await groups.wait_routed("fresh", {first.message_queue.broker_name})
            assert len(await producer.fetch_publish_message_queues("fresh")) == 4


async def test_no_route_and_a_refusal_raise(tmp_path) -> None:
    async with open_groups(tmp_path, groups=0) as groups:
        app = await groups.client()
        async with Producer("pg", groups.namesrv).start(app.connect) as producer:
            with pytest.raises(NoRouteError):
                await producer.send(Message("nowhere", b"x"))
    async with open_groups(tmp_path / "refusal") as groups:
        await groups.create_topic("orders")
        app = await groups.client()
        producer = Producer("pg", groups.namesrv)
        async with producer.start(app.connect):
            # A queue past the write queues is MESSAGE_ILLEGAL: not retried.
            with pytest.raises(BrokerError) as refused:
                await producer.send(Message("orders", b"x"), MessageQueue("orders", "broker-a", 9))
            assert refused.value.code == 13


async def test_a_dead_group_is_retried_on_the_other_then_left_out_of_the_route(tmp_path) -> None:
    async with open_groups(tmp_path, groups=2) as groups:
        await groups.create_topic("orders", queues=2)
        app = await groups.client()
        producer = Producer("pg", groups.namesrv, poll_name_server_interval=3600)
        async with producer.start(app.connect):
            await producer.send(Message("orders", b"before"))
            await groups.cluster.kill("a")
            # Every send lands, on broker-b: a send to the dead group fails to connect and
            # is retried on the other, and the route fetched then no longer names it.
            results = [await producer.send(Message("orders", f"after {n}".encode()))
                       for n in range(6)]
            assert {r.message_queue.broker_name for r in results} == {"broker-b"}
            assert {q.broker_name for q in await producer.fetch_publish_message_queues(
                "orders")} == {"broker-b"}


async def test_the_producer_follows_a_failover_to_the_new_master(tmp_path) -> None:
    async with open_cluster(tmp_path, namesrvs=1) as cluster:
        app, master = await start_replicated_topic(cluster, "orders", app="client")
        producer = Producer("pg", list(cluster.namesrv_addresses.values()),
                            poll_name_server_interval=3600)
        async with producer.start(app.connect):
            with trio.fail_after(20):
                while True:
                    try:
                        await producer.send(Message("orders", b"first"))
                        break
                    except NoRouteError:  # the master has not registered the topic yet
                        await trio.sleep(0.05)
            epoch = cluster.broker(master).replicas.master_epoch
            await cluster.kill(master)
            new_master = await cluster.wait_master(epoch_above=epoch)
            # The caller only sends again: refused or unanswered sends fetch the route.
            with trio.fail_after(20):
                while True:
                    try:
                        result = await producer.send(Message("orders", b"after"))
                        break
                    except (NoRouteError, BrokerError, RpcError):
                        await trio.sleep(0.05)
        assert result.send_status is SendStatus.SEND_OK
        assert any(r.body == b"after" for r in cluster.broker(new_master).log.iter_records())


@pytest.mark.parametrize("transport", ["inproc", "tcp"])
async def test_sends_ride_through_a_master_kill_or_fail_only_after_the_send_timeout(
        tmp_path, transport) -> None:
    """A producer sending without pause while its group's master is killed: each send is
    stored, or fails with its reason once its send timeout is spent; none fails sooner,
    and the producer needs no route poll to find the new master."""
    timeout = 3.0
    async with open_cluster(tmp_path, transport=transport, namesrvs=1,
                            broker={"all_ack_in_sync_state_set": True}) as cluster:
        app, master = await start_replicated_topic(cluster, "orders", app="client")
        await cluster.wait_for(lambda: len(cluster.broker(master).replicas.sync_state_set) == 3)
        producer = Producer("pg", list(cluster.namesrv_addresses.values()),
                            send_msg_timeout=timeout, poll_name_server_interval=3600)
        outcomes: list[tuple[float, object]] = []
        stored_after_kill: list[str] = []
        killed = trio.Event()
        async with producer.start(app.connect):
            with trio.fail_after(20):  # until the master has registered the topic
                while True:
                    with contextlib.suppress(NoRouteError):
                        if await producer.fetch_publish_message_queues("orders"):
                            break
                    await trio.sleep(0.05)

            async def send_without_pause() -> None:
                n = 0
                while len(stored_after_kill) < 20:
                    n += 1
                    began = trio.current_time()
                    after_kill = killed.is_set()
                    try:
                        result = await producer.send(Message("orders", f"m{n}".encode()))
                    except (NoRouteError, BrokerError, RpcError) as exc:
                        outcomes.append((trio.current_time() - began, exc))
                        continue
                    outcomes.append((trio.current_time() - began, result))
                    if after_kill:
                        stored_after_kill.append(result.msg_id)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(send_without_pause)
                await cluster.wait_for(lambda: len(outcomes) >= 20)
                epoch = cluster.broker(master).replicas.master_epoch
                await cluster.kill(master)
                killed.set()
                new_master = await cluster.wait_master(epoch_above=epoch)
        failures = [(took, exc) for took, exc in outcomes if isinstance(exc, Exception)]
        for took, exc in failures:
            assert took >= timeout, f"failed after {took:.3f} s, before its timeout: {exc}"
            assert str(exc), "a failure without its reason"
        bodies = {r.properties["UNIQ_KEY"] for r in cluster.broker(new_master).log.iter_records()}
        assert set(stored_after_kill) <= bodies
