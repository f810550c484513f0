"""Nodes as processes of their own (``python -m triomq.cli <role>``), for attacks over TCP."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from triomq.testing.cluster import free_tcp_port

ROOT = Path(__file__).resolve().parents[2]


class NodeProcess:
    """One node process listening on a TCP port of 127.0.0.1."""

    def __init__(self, role: str, name: str, root: Path, sections: str) -> None:
        self.role = role
        self.port = free_tcp_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.root = root
        self.config = root / f"{name}.toml"
        self.config.write_text(f'name = "{name}"\nrole = "{role}"\nlisten = "{self.address}"\n'
                               f'log_level = "WARNING"\n{sections}\n')
        self.log = root / f"{name}.log"
        self.process: trio.Process | None = None

    async def start(self) -> None:
        with open(self.log, "ab") as log:
            self.process = await trio.lowlevel.open_process(
                [sys.executable, "-m", "triomq.cli", self.role, "--config", str(self.config)],
                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)
        with trio.fail_after(60):
            while True:
                self.check_running()
                try:
                    stream = await trio.open_tcp_stream("127.0.0.1", self.port)
                except OSError:
                    await trio.sleep(0.05)
                    continue
                await stream.aclose()
                return

    def check_running(self) -> None:
        """Fail at once, with the node's log, if the process exited."""
        assert self.process is not None
        if self.process.returncode is not None:
            raise AssertionError(f"{self.role} exited with {self.process.returncode}:\n"
                                 f"{self.log.read_text(errors='replace')}")

    def peak_rss(self) -> int:
        """The process's peak resident memory so far, in bytes (``VmHWM``)."""
        assert self.process is not None
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        line = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
        return int(line.split()[1]) * 1024

    async def stop(self) -> int:
        """Stop gracefully (SIGTERM); the exit code."""
        assert self.process is not None
        if self.process.returncode is None:
            self.process.terminate()
            with trio.move_on_after(30) as waited:
                await self.process.wait()
            if waited.cancelled_caught:
                self.process.kill()
                await self.process.wait()
        return self.process.returncode


@asynccontextmanager
async def node_process(role: str, name: str, root: Path, sections: str = ""
                       ) -> AsyncIterator[NodeProcess]:
    node = NodeProcess(role, name, root, sections)
    await node.start()
    try:
        yield node
    finally:
        await node.stop()


def broker_sections(root: Path, extra: str = "") -> str:
    """A static master broker keeping its store under ``root``, with ``extra`` [broker] keys."""
    return f"""
[store]
path = "{root / 'store'}"
[broker]
broker_name = "broker-a"
ha_listen_port = {free_tcp_port()}
flush_policy = "none"
{extra}
"""


async def closed_by_peer(stream: trio.abc.Stream) -> bool:
    """Whether the far end closed ``stream`` (an end of file, or a reset: a peer that
    closes with bytes of ours unread resets the connection); False if it sent data."""
    try:
        return await stream.receive_some(1024) == b""
    except trio.BrokenResourceError:
        return True


async def connect_from(source: str, port: int) -> trio.SocketStream:
    """A TCP stream to 127.0.0.1:``port`` from the local address ``source``."""
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    await sock.bind((source, 0))
    await sock.connect(("127.0.0.1", port))
    return trio.SocketStream(sock)
