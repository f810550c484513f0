"""``triomq <role> --config FILE`` refuses to start with one line and exit 2.

For each configuration or environment error (a config path that is a
directory or cannot be read, a port in use, a store path that cannot be
made or written) the process prints one line naming the problem, no
traceback, and creates no store file.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from triomq.testing.cluster import free_tcp_port

AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A TCP port on 127.0.0.1 another socket listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def broker_config(folder: Path, *, rpc_port: int, ha_port: int, store: Path) -> Path:
    path = folder / "broker.toml"
    path.write_text(f'name = "broker-a-0"\nrole = "broker"\n'
                    f'listen = "tcp://127.0.0.1:{rpc_port}"\n'
                    f'[store]\nscheme = "mmap"\npath = "{store}"\n'
                    f'[broker]\nbroker_name = "broker-a"\nbroker_id = 0\n'
                    f'ha_listen_port = {ha_port}\n')
    return path


def start(config: Path | str) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-m", "triomq.cli", "broker", "--config", str(config)],
                          capture_output=True, text=True, timeout=60, check=False)
    return done.returncode, done.stderr


def assert_refused(code: int, stderr: str, *names: str) -> None:
    assert code == 2, stderr
    assert len(stderr.splitlines()) == 1, stderr
    assert stderr.startswith("triomq: error: ") and "Traceback" not in stderr
    for name in names:
        assert name in stderr


def test_rpc_port_in_use(tmp_path: Path, taken_port: int) -> None:
    store = tmp_path / "store"
    config = broker_config(tmp_path, rpc_port=taken_port, ha_port=free_tcp_port(), store=store)
    assert_refused(*start(config), f"tcp://127.0.0.1:{taken_port}: cannot listen",
                   "Address already in use")
    assert not store.exists()


def test_ha_port_in_use(tmp_path: Path, taken_port: int) -> None:
    # The broker's HA port is bound with the RPC port, before any store file is written.
    store = tmp_path / "store"
    config = broker_config(tmp_path, rpc_port=free_tcp_port(), ha_port=taken_port, store=store)
    assert_refused(*start(config), f"tcp://127.0.0.1:{taken_port}: cannot listen",
                   "Address already in use")
    assert not store.exists()


def test_config_path_is_a_directory(tmp_path: Path) -> None:
    assert_refused(*start(tmp_path), f"config file {str(tmp_path)!r} cannot be read",
                   "Is a directory")


def test_config_is_not_text(tmp_path: Path) -> None:
    config = tmp_path / "broker.toml"
    config.write_bytes(b'name = "\xff"\n')
    assert_refused(*start(config), "cannot be read: not UTF-8 text")


@pytest.mark.skipif(AS_ROOT, reason="root reads a file whatever its mode")
def test_config_is_unreadable(tmp_path: Path) -> None:
    config = broker_config(tmp_path, rpc_port=free_tcp_port(), ha_port=free_tcp_port(),
                           store=tmp_path / "store")
    config.chmod(0)
    assert_refused(*start(config), "cannot be read: Permission denied")


def test_store_path_below_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    config = broker_config(tmp_path, rpc_port=free_tcp_port(), ha_port=free_tcp_port(),
                           store=tmp_path / "file" / "store")
    assert_refused(*start(config), "service 'broker' could not start", "Not a directory")


@pytest.mark.skipif(AS_ROOT, reason="root writes in a folder whatever its mode")
def test_store_path_not_writable(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    config = broker_config(tmp_path, rpc_port=free_tcp_port(), ha_port=free_tcp_port(),
                           store=locked / "store")
    assert_refused(*start(config), "service 'broker' could not start", "Permission denied")
    assert not (locked / "store").exists()
