"""Broker replicas as processes of their own (``python -m triomq.cli broker``), in
controller mode with ``all_ack_in_sync_state_set = true``, so that a test can SIGKILL one."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Collection, Mapping
from pathlib import Path

import trio

from triomq.controller.client import (
    ControllerClient,
    ControllerError,
    ControllerUnavailable,
    ReplicaInfo,
)
from triomq.testing.cluster import BROKER_NAME, free_tcp_port

ROOT = Path(__file__).resolve().parents[2]


def replica_sections(store: Path, controllers: list[str], namesrv: str,
                     broker: Mapping[str, object] | None = None) -> str:
    """The ``[store]`` and ``[broker]`` sections of a replica storing under ``store``;
    ``broker``: more ``[broker]`` keys (numbers, booleans, strings)."""
    quoted = ", ".join(f'"{c}"' for c in controllers)
    more = "".join(f"{key} = {json.dumps(value)}\n" for key, value in (broker or {}).items())
    return f"""
[store]
path = "{store}"
[broker]
broker_name = "{BROKER_NAME}"
enable_controller_mode = true
controller_addresses = [{quoted}]
namesrv_addr = ["{namesrv}"]
ha_listen_port = {free_tcp_port()}
all_ack_in_sync_state_set = true
""" + more


def broker_toml(name: str, root: Path, address: str, controllers: list[str], namesrv: str,
                broker: Mapping[str, object] | None = None) -> str:
    return f"""
name = "{name}"
role = "broker"
listen = "{address}"
log_level = "WARNING"
""" + replica_sections(root / name, controllers, namesrv, broker)


class Replica:
    """One broker replica as a process of its own, at a fixed address."""

    def __init__(self, name: str, root: Path, controllers: list[str], namesrv: str,
                 port: int | None = None, **broker: object) -> None:
        self.name = name
        self.address = f"tcp://127.0.0.1:{port or free_tcp_port()}"
        self.config = root / f"{name}.toml"
        self.config.write_text(broker_toml(name, root, self.address, controllers, namesrv,
                                           broker))
        self.log = root / f"{name}.log"
        self.process: trio.Process | None = None

    async def start(self) -> None:
        with open(self.log, "ab") as log:
            self.process = await trio.lowlevel.open_process(
                [sys.executable, "-m", "triomq.cli", "broker", "--config", str(self.config)],
                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)

    async def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        await self.process.wait()

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()
            with trio.move_on_after(10) as waited:
                await self.process.wait()
            if waited.cancelled_caught:
                self.process.kill()
                await self.process.wait()


async def wait_group(controllers: ControllerClient, addresses: Collection[str], *,
                     epoch_above: int = 0, in_sync: int = 3) -> ReplicaInfo:
    """The group's replica info once its master is one of ``addresses``, of an epoch above
    ``epoch_above``, with ``in_sync`` replicas in its SyncStateSet (a liveness bound)."""
    with trio.fail_after(60):
        while True:
            try:
                info = await controllers.get_replica_info(BROKER_NAME)
            except (ControllerError, ControllerUnavailable):
                info = None  # no leader yet, or the group not registered yet
            if (info is not None and info.master_address in addresses
                    and info.master_epoch > epoch_above and len(info.sync_state_set) == in_sync):
                return info
            await trio.sleep(0.05)
