"""The HA port with a cluster credential: only a handshake that proves its slave counts.

A ``ReplicasManager`` given ``auth`` admits a slave's handshake only after
the credential frame before it verifies (``triomq.node_auth``) and names
the same slave; a refused connection gets no answer, replaces no slave's
connection and counts for nobody. Without ``auth``, a connection that
breaks the protocol before its admission is no connection of the slave it
named either.
"""

from __future__ import annotations

import trio
from test_ha_driver import inline
from test_ha_port_bounds import Node, inproc, start_master, wait_for

from triomq.broker.replication.replicas_manager import ReplicasManager
from triomq.clock import wall_ms
from triomq.ha.master_driver import HAMasterConfig
from triomq.ha.slave_driver import HASlave, HASlaveConfig
from triomq.node_auth import InnerAuth, NonceCache
from triomq.protocol.ha import Ack, Credential, SlaveHandshake, encode

SECRET = "ha-secret"


def auth(identity: str, secret: str = SECRET) -> InnerAuth:
    return InnerAuth("cluster", secret, identity, NonceCache(30_000))


def opening(slave: int, credential: dict[str, str] | None) -> bytes:
    frame = b"" if credential is None else encode(Credential(tuple(sorted(credential.items()))))
    return frame + encode(SlaveHandshake(slave))


async def answered(stream: trio.abc.Stream) -> bytes:
    """What the master sends before it closes (b"" if it closes unanswered)."""
    try:
        return await stream.receive_some()
    except trio.BrokenResourceError:
        return b""


async def test_a_broken_handshake_naming_a_slave_leaves_its_connection_counted(
        autojump_clock) -> None:
    m = Node("m", 0)
    m.log.append(b"x" * 300)
    transport, address = inproc()
    async with trio.open_nursery() as nursery:
        manager, master = await start_master(nursery, transport, address, m)
        real = await transport.connect(manager.ha_address)
        await real.send_all(opening(1, None) + encode(Ack(0)))
        await wait_for(lambda: master.tracker.ack_offset(1, 300) == 0)
        # The same name, then an ack past the master's log: closed before its admission.
        broken = await transport.connect(manager.ha_address)
        await broken.send_all(opening(1, None) + encode(Ack(10_000)))
        assert await answered(broken) == b""
        assert master.tracker.slaves[1].connections == 1
        assert manager.ha_connections_evicted == 0
        nursery.cancel_scope.cancel()


async def test_only_a_handshake_with_its_slaves_credential_is_admitted(autojump_clock) -> None:
    m, s = Node("m", 0), Node("s", 1)
    m.log.append(b"x" * 300)
    transport, address = inproc()
    async with trio.open_nursery() as nursery:
        manager = ReplicasManager(
            log=m.log, epoch_store=m.epochs, address=m.name,
            ha_listener=await transport.listen(address), connect=transport.connect,
            master_config=HAMasterConfig(ha_transfer_batch_size=100), offload=inline,
            auth=auth("m"))
        await nursery.start(manager.run)
        await manager.change_to_master(1, 0, frozenset({0, 1}))
        master = manager.ha_master
        assert master is not None
        slave_auth = auth("s")
        slave = HASlave(log=s.log, epoch_store=s.epochs, broker_id=1,
                        connect=lambda: transport.connect(manager.ha_address),
                        config=HASlaveConfig(ha_send_heartbeat_interval=100), offload=inline,
                        credential=lambda: slave_auth.handshake_credential(
                            1, now_ms=wall_ms(), nonce=f"s-{slave.connections}"))
        await nursery.start(slave.run)
        await wait_for(lambda: s.log.data == m.log.data)

        # Forged: no credential, a guessed secret, another slave's credential.
        forged = [None, auth("x", "guess").handshake_credential(1, now_ms=wall_ms(),
                                                                 nonce="g"),
                  slave_auth.handshake_credential(2, now_ms=wall_ms(), nonce="t")]
        for credential in forged:
            stream = await transport.connect(manager.ha_address)
            await stream.send_all(opening(1, credential) + encode(Ack(300)))
            assert await answered(stream) == b""
        assert manager.ha_handshakes_unauthenticated == 3
        assert (manager.ha_connections_evicted, master.tracker.slaves[1].connections) == (0, 1)

        # A credential used once (it replaces the slave's connection, being the slave's),
        # then replayed: refused.
        captured = slave_auth.handshake_credential(1, now_ms=wall_ms(), nonce="captured")
        first = await transport.connect(manager.ha_address)
        await first.send_all(opening(1, captured))
        assert await answered(first) != b""
        await first.aclose()
        replayed = await transport.connect(manager.ha_address)
        await replayed.send_all(opening(1, captured))
        assert await answered(replayed) == b""
        assert manager.ha_handshakes_unauthenticated == 4
        # The real slave proves itself again and keeps replicating.
        m.log.append(b"y" * 200)
        manager.appended()
        await wait_for(lambda: s.log.data == m.log.data)
        nursery.cancel_scope.cancel()
