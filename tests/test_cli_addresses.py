"""The CLI's address forms and exit codes, the same in every command family.

Name servers (``-n``), controllers (``--controller``) and brokers (``-b``)
take ``host:port`` or ``tcp://host:port``, and lists joined by ``;``. A
node that does not answer is one line on standard error, ``triomq: error:
no <kind> answered (<address>: <reason>)``, each address named once, and
exit 2. Most of this runs the real ``triomq`` in a process of its own.
"""

from __future__ import annotations

import io
import subprocess
import sys

import pytest
import trio
import trio.testing

from triomq.cli import build_parser
from triomq.cli_address import Unreachable, dial_address, dial_addresses, reason_unreachable
from triomq.controller.core.codes import RequestCode
from triomq.errors import ConfigError
from triomq.plugin_manager import PluginManager
from triomq.plugins.controller_dledger.cli import run_admin
from triomq.plugins.transport_inproc import InprocNetwork, InprocTransport
from triomq.protocol.remoting import RemotingCommand
from triomq.rpc import RpcConnection, RpcConnectionError, RpcServer, open_rpc_client
from triomq.testing.cluster import free_tcp_port, open_cluster

TRIOMQ = [sys.executable, "-c", "import sys; from triomq.cli import main; sys.exit(main())"]


def run_triomq(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TRIOMQ, *argv], capture_output=True, text=True, timeout=60,
                          check=False)


# -- the forms ----------------------------------------------------------------------------


def test_host_port_and_scheme_forms_dial_alike():
    assert dial_address("127.0.0.1:9876") == "tcp://127.0.0.1:9876"
    assert dial_address(" tcp://127.0.0.1:9876 ") == "tcp://127.0.0.1:9876"
    assert dial_address("[::1]:9876") == "tcp://[::1]:9876"
    assert dial_address("inproc://ns") == "inproc://ns"
    assert dial_addresses("10.0.0.1:9876;tcp://10.0.0.2:9876; ;10.0.0.1:9876", "-n") == [
        "tcp://10.0.0.1:9876", "tcp://10.0.0.2:9876"]
    assert dial_addresses(["a:1", "b:2;c:3"], "--controller") == [
        "tcp://a:1", "tcp://b:2", "tcp://c:3"]


@pytest.mark.parametrize("text", ["nonsense", "host:", ":9876", "tcp://", "host:port"])
def test_a_malformed_address_is_refused_naming_it(text):
    with pytest.raises(ConfigError, match="expected host:port"):
        dial_address(text)


def test_an_empty_list_names_the_option():
    with pytest.raises(ConfigError, match="-n names no address"):
        dial_addresses(" ; ", "-n")


def test_the_reason_names_no_address():
    error = RpcConnectionError("cannot connect to tcp://10.0.0.1:9876: no route")
    assert reason_unreachable(error, "tcp://10.0.0.1:9876") == "cannot connect: no route"
    assert str(Unreachable("name server", {"tcp://10.0.0.1:9876": error})) == (
        "no name server answered (10.0.0.1:9876: cannot connect: no route)")


# -- nothing listens there: every family alike --------------------------------------------

FAMILIES = {
    "consume": ["consume", "-t", "T", "-g", "g", "-n"],
    "consumer-progress": ["admin", "consumer-progress", "-g", "g", "-n"],
    "cluster-list": ["admin", "cluster-list", "-n"],
    "topic-route": ["admin", "topic-route", "-t", "T", "-n"],
    "update-topic": ["admin", "update-topic", "-c", "DefaultCluster", "-t", "T", "-n"],
    "get-controller-metadata": ["admin", "get-controller-metadata", "--controller"],
    "get-sync-state-set": ["admin", "get-sync-state-set", "--broker-name", "b",
                           "--controller"],
    "elect-master": ["admin", "elect-master", "--broker-name", "b", "--broker-id", "1",
                     "--controller"],
    "broker-status": ["admin", "broker-status", "-b"],
}
KIND = {"get-controller-metadata": "controller", "get-sync-state-set": "controller",
        "elect-master": "controller", "broker-status": "broker"}


@pytest.mark.parametrize("scheme", ["", "tcp://"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_nothing_listening_is_one_line_naming_the_address_once_and_exit_2(family, scheme):
    address = f"127.0.0.1:{free_tcp_port()}"
    done = run_triomq(*FAMILIES[family], scheme + address, "--timeout", "5")
    kind = KIND.get(family, "name server")
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr == f"triomq: error: no {kind} answered ({address}: connection refused)\n"


def test_produce_uses_the_same_prefix_and_exit_code():
    done = run_triomq("produce", "-t", "T", "-n", f"127.0.0.1:{free_tcp_port()}")
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1
    assert done.stderr.startswith("triomq: error: no name server answered (")


@pytest.mark.parametrize("family", ["cluster-list", "get-sync-state-set"])
def test_each_address_of_a_list_is_named_once(family):
    first, second = (f"127.0.0.1:{free_tcp_port()}" for _ in range(2))
    done = run_triomq(*FAMILIES[family], f"{first};tcp://{second}")
    kind = KIND.get(family, "name server")
    assert done.returncode == 2
    assert done.stderr == (f"triomq: error: no {kind} answered ({first}: connection refused; "
                           f"{second}: connection refused)\n")


@pytest.mark.parametrize("family", ["consume", "cluster-list", "get-controller-metadata",
                                    "broker-status"])
def test_a_malformed_address_is_one_line_and_exit_2(family):
    done = run_triomq(*FAMILIES[family], "nonsense")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("triomq: error: address 'nonsense': expected host:port")
    assert len(done.stderr.splitlines()) == 1


# -- running servers ----------------------------------------------------------------------


async def test_every_form_reaches_running_servers(tmp_path):
    async with open_cluster(tmp_path, transport="tcp", controllers=1, brokers=0,
                            namesrvs=1) as cluster:
        await cluster.start_namesrvs()
        await cluster.start_controllers()
        [namesrv] = (a.removeprefix("tcp://") for a in cluster.namesrv_addresses.values())
        [controller] = (a.removeprefix("tcp://") for a in cluster.controller_addresses.values())
        dead = f"127.0.0.1:{free_tcp_port()}"
        for address in (namesrv, f"tcp://{namesrv}", f"{dead};{namesrv}"):
            done = await trio.run_process([*TRIOMQ, "admin", "cluster-list", "-n", address],
                                          capture_stdout=True, capture_stderr=True,
                                          check=False)
            assert done.returncode == 0, done.stderr
            assert done.stdout.decode().startswith("cluster")
        for address in (controller, f"tcp://{controller}", f"{dead};{controller}"):
            done = await trio.run_process(
                [*TRIOMQ, "admin", "get-controller-metadata", "--controller", address],
                capture_stdout=True, capture_stderr=True, check=False)
            assert done.returncode == 0, done.stderr
            assert f"1             {controller}  leader" in done.stdout.decode()
        # A group the controllers do not know is a refusal: exit 1, not "cannot reach".
        done = await trio.run_process(
            [*TRIOMQ, "admin", "get-sync-state-set", "--broker-name", "nobody",
             "--controller", controller], capture_stdout=True, capture_stderr=True,
            check=False)
        assert done.returncode == 1
        assert "CONTROLLER_BROKER_METADATA_NOT_EXIST" in done.stdout.decode()


# -- a controller that takes the connection and never answers -------------------------


async def _silent(request: RemotingCommand, peer: RpcConnection) -> None:
    await trio.sleep_forever()


@pytest.mark.parametrize("timeout", [0.5, 2.0, 5.0])
async def test_controller_commands_give_up_at_their_timeout(
        timeout: float, autojump_clock: trio.testing.MockClock) -> None:
    network = InprocNetwork(f"silent-{timeout}", seed=1)
    server = RpcServer({RequestCode.CONTROLLER_GET_METADATA_INFO: _silent,
                        RequestCode.CONTROLLER_GET_SYNC_STATE_DATA: _silent})
    args = build_parser(PluginManager.discover()).parse_args([
        "admin", "get-sync-state-set", "--broker-name", "b", "--timeout", str(timeout),
        "--controller", "inproc://silent-1;inproc://silent-2"])
    async with trio.open_nursery() as nursery:
        for name in ("inproc://silent-1", "inproc://silent-2"):
            await nursery.start(server.serve, await InprocTransport(network, name).listen(name))
        async with open_rpc_client(InprocTransport(network, "inproc://admin").connect) as rpc:
            start = trio.current_time()
            with pytest.raises(Unreachable) as raised:
                await run_admin(args, rpc, io.StringIO())
            assert trio.current_time() - start <= timeout
        nursery.cancel_scope.cancel()
    assert str(raised.value) == ("no controller answered (inproc://silent-1: no answer in "
                                 "time; inproc://silent-2: no answer in time)")
