"""What ``triomq.testing`` offers third-party plugins: the conformance suites, by the
names the README gives, and a clear verdict on a listener outside the contract."""

import subprocess
import sys

import pytest
import trio

from triomq.plugins.transport_inproc import InprocNetwork, InprocTransport
from triomq.testing import (
    CommitLogSuite,
    EntryLogSuite,
    MetaStoreSuite,
    RpcConformance,
    TransportConformance,
    rpc_suite,
    store_suite,
    transport_suite,
)


def test_the_suites_are_exported_where_the_readme_says():
    assert TransportConformance is transport_suite.TransportConformance
    assert RpcConformance is rpc_suite.RpcConformance
    assert (CommitLogSuite, EntryLogSuite, MetaStoreSuite) == (
        store_suite.CommitLogSuite, store_suite.EntryLogSuite, store_suite.MetaStoreSuite)
    with pytest.raises(ImportError, match="TransportSuite"):
        from triomq.testing import TransportSuite  # noqa: F401


def test_importing_the_package_does_not_load_pytest():
    code = "import sys, triomq.testing; print('pytest' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout == "False\n"


class _BareListener:
    """A listener with the methods but not ``async with``."""

    def __init__(self, inner: trio.abc.Listener) -> None:
        self.inner = inner
        self.address = inner.address

    async def accept(self) -> trio.abc.Stream:
        return await self.inner.accept()

    async def aclose(self) -> None:
        await self.inner.aclose()


class _BareTransport(InprocTransport):
    async def listen(self, address: str) -> _BareListener:
        return _BareListener(await super().listen(address))


async def test_a_listener_without_async_with_is_named_by_the_contract_test():
    transport = _BareTransport(InprocNetwork("bare", seed=1), "inproc://client")
    with pytest.raises(AssertionError, match="_BareListener lacks __aenter__, __aexit__"):
        await TransportConformance().test_satisfies_the_contract(transport, "inproc://server")


async def test_an_in_tree_listener_passes_the_contract_test():
    transport = InprocTransport(InprocNetwork("full", seed=1), "inproc://client")
    await TransportConformance().test_satisfies_the_contract(transport, "inproc://server")
    await TransportConformance().test_async_with_closes_the_listener(transport, "inproc://server")


def test_a_skip_in_a_trio_test_keeps_its_reason(tmp_path):
    (tmp_path / "test_skips.py").write_text(
        "import pytest, trio\n"
        "pytestmark = pytest.mark.trio\n"
        "async def test_skips():\n"
        "    async with trio.open_nursery():\n"
        "        pass\n"
        "    pytest.skip('the transport cannot half-close')\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs",
                           "test_skips.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stdout
    assert "SKIPPED [1] test_skips.py:6: the transport cannot half-close" in done.stdout


def test_free_tcp_ports_handed_out_in_a_row_never_repeat():
    # A cluster picks its controllers' and name servers' ports before any listens: a
    # repeat would make the second listener fail with "address already in use".
    from triomq.testing.cluster import free_tcp_port

    ports = [free_tcp_port() for _ in range(2_000)]
    assert len(set(ports)) == len(ports)
