"""Both in-tree transports against the transport and RPC conformance suites."""

from __future__ import annotations

from pathlib import Path

import pytest
import trustme

from triomq.plugins.transport_inproc import InprocNetwork, InprocTransport
from triomq.plugins.transport_tcp import TcpTransport, TlsOptions
from triomq.testing.cluster import free_tcp_port
from triomq.testing.rpc_suite import RpcConformance
from triomq.testing.transport_suite import TransportConformance


@pytest.fixture
def free_tcp_address() -> str:
    """A loopback address nothing listens on (a port just bound and released)."""
    return f"tcp://127.0.0.1:{free_tcp_port()}"


@pytest.fixture
def mutual_tls(tmp_path: Path) -> TlsOptions:
    """One certificate per node, used both ways, checked against the test CA."""
    ca = trustme.CA()
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    node_file = tmp_path / "node.pem"
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
        str(node_file))
    return TlsOptions(cert=str(node_file), ca=str(ca_file), require_client_cert=True)


class InprocFixtures:
    @pytest.fixture
    def transport(self) -> InprocTransport:
        return InprocTransport(InprocNetwork("conformance", seed=1), "inproc://suite-client")

    @pytest.fixture
    def listen_address(self) -> str:
        return "inproc://suite-server"

    @pytest.fixture
    def unreachable_address(self) -> str:
        return "inproc://nobody"


class TcpFixtures:
    @pytest.fixture
    def transport(self) -> TcpTransport:
        return TcpTransport()

    @pytest.fixture
    def listen_address(self) -> str:
        return "tcp://127.0.0.1:0"

    @pytest.fixture
    def unreachable_address(self, free_tcp_address: str) -> str:
        return free_tcp_address


class MutualTlsFixtures(TcpFixtures):
    @pytest.fixture
    def transport(self, mutual_tls: TlsOptions) -> TcpTransport:
        return TcpTransport(tls=mutual_tls)


class TestInprocTransport(InprocFixtures, TransportConformance):
    pass


class TestTcpTransport(TcpFixtures, TransportConformance):
    pass


class TestMutualTlsTransport(MutualTlsFixtures, TransportConformance):
    pass


class TestRpcOverInproc(InprocFixtures, RpcConformance):
    pass


class TestRpcOverTcp(TcpFixtures, RpcConformance):
    pass


class TestRpcOverMutualTls(MutualTlsFixtures, RpcConformance):
    pass
