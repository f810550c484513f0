"""Admin access: admin requests need an admin's credential once one is configured.

Signed requests (RocketMQ's ACL: AccessKey and an HmacSHA1 Signature) over
the in-process transport, client certificates over mutual TLS on real TCP
(``trustme``), the admin CLI's signing options, and the signature checked
against one computed here from RocketMQ's algorithm, not by our signer.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import io
import json
import os
import ssl
import sys
import tomllib
from pathlib import Path

import attrs
import pytest
import trio
import trustme

import triomq.plugins.broker
import triomq.plugins.controller_dledger
from triomq.admin_access import NO_PERMISSION, AdminAccess, ClientCertificate
from triomq.cli import build_parser
from triomq.cli_credentials import Signer
from triomq.config import NodeConfig, SecurityConfig, TransportConfig, from_mapping
from triomq.controller import RequestCode as ControllerCode
from triomq.errors import ConfigError
from triomq.namesrv.core.processor import RequestCode
from triomq.plugin_manager import PluginManager
from triomq.plugins.controller_dledger.cli import run_admin as controller_admin
from triomq.plugins.transport_inproc import InprocNetwork, InprocTransport
from triomq.protocol import acl
from triomq.protocol.remoting import RemotingCommand
from triomq.rpc import RpcConnection, RpcServer
from triomq.runtime import open_node
from triomq.testing.cluster import free_tcp_port, open_cluster
from triomq.testing.direct_send import DirectProducer

ACCESS_KEY, SECRET_KEY = "rocketmq2", "12345678"
SECURITY = {"admin_access_key": ACCESS_KEY, "admin_secret_key": SECRET_KEY}
UPDATE_AND_CREATE_TOPIC = 17
ACCESS_KEY_FIELD = acl.ACCESS_KEY
#: The node's wall clock in the pure rule's tests, in ms.
NOW = 1_700_000_000_000
DELETE = RequestCode.DELETE_TOPIC_IN_NAMESRV


def rocketmq_signature(fields: dict[str, str], body: bytes, secret_key: str) -> str:
    """RocketMQ's AclClientRPCHook signature, written out from its documentation:
    values by key (Java string order), then the body; HmacSHA1; base64."""
    ordered = sorted(fields, key=lambda key: key.encode("utf-16-be"))
    content = "".join(fields[key] for key in ordered).encode() + body
    digest = hmac.new(secret_key.encode(), content, hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def refused_remark(answer: RemotingCommand) -> str:
    assert answer.code == NO_PERMISSION, (answer.code, answer.remark)
    remark = answer.remark or ""
    assert SECRET_KEY not in remark
    return remark


# -- the signature ------------------------------------------------------------------


def test_the_signature_is_rocketmqs_for_a_fixed_request():
    fields = {"topic": "orders", "clusterName": "DefaultCluster", ACCESS_KEY_FIELD: ACCESS_KEY}
    body = b'{"x":1}'
    expected = rocketmq_signature(fields, body, SECRET_KEY)
    # Fixed: values in the order AccessKey, clusterName, topic, then the body.
    assert expected == base64.b64encode(hmac.new(
        b"12345678", b'rocketmq2DefaultClusterorders{"x":1}', hashlib.sha1).digest()).decode()
    signed = acl.sign({"topic": "orders", "clusterName": "DefaultCluster"}, body, ACCESS_KEY,
                      SECRET_KEY)
    assert signed[acl.SIGNATURE] == expected
    assert acl.signature_matches({**fields, acl.SIGNATURE: expected}, body, SECRET_KEY)
    assert not acl.signature_matches({**fields, acl.SIGNATURE: expected}, b"", SECRET_KEY)



def test_keys_sort_as_java_strings_do():
    # U+FF21 (a BMP letter) sorts after U+1F600 by code point but before it by UTF-16
    # code unit, as Java's TreeMap sorts.
    fields = {"\U0001f600": "b", "\uff21": "a", ACCESS_KEY_FIELD: "k"}
    content = acl.signed_content(fields, b"")
    assert content == b"kba"


# -- the rule ---------------------------------------------------------------------


def delete_request(fields: dict[str, str] | None = None) -> RemotingCommand:
    return RemotingCommand.request(DELETE, {"topic": "orders", **(fields or {})})


def test_the_rule_by_hand():
    access = AdminAccess(ACCESS_KEY, SECRET_KEY, frozenset({"CN=ops"}))
    assert access.refusal(delete_request(), ClientCertificate("ab", ("ops",)), NOW) is None
    remark = refused_remark(access.refusal(delete_request(), None, NOW))
    assert remark.startswith("DELETE_TOPIC_IN_NAMESRV (216) needs admin access")
    assert "no client certificate" in remark and "no AccessKey and Signature" in remark
    other = ClientCertificate("cd" * 32, ("app",))
    assert f"sha256:{'cd' * 32} is not an admin's" in refused_remark(
        access.refusal(delete_request(), other, NOW))
    signed = acl.sign({"topic": "orders"}, b"", ACCESS_KEY, SECRET_KEY)
    assert access.refusal(delete_request(signed), other, NOW) is None
    # Anything else stays open, and so does a broker's own ELECT_MASTER.
    assert access.refusal(RemotingCommand.request(310, {}), None, NOW) is None
    assert access.refusal(RemotingCommand.request(ControllerCode.CONTROLLER_ELECT_MASTER, {
        "designateElect": "false"}), None, NOW) is None
    assert access.refusal(RemotingCommand.request(ControllerCode.CONTROLLER_ELECT_MASTER, {
        "designateElect": "true"}), None, NOW) is not None
    # With nothing configured, everything is open.
    assert AdminAccess().refusal(delete_request(), None, NOW) is None


def bound(code: int, fields: dict[str, str], *, at: int = NOW, nonce: str = "n1"
          ) -> dict[str, str]:
    """Signed as the triomq CLI signs: the code, a time and a nonce among the fields."""
    return acl.sign({**fields, "RequestCode": str(code), "Timestamp": str(at), "Nonce": nonce},
                    b"", ACCESS_KEY, SECRET_KEY)


def test_a_bound_signature_passes_once_for_its_code_and_time():
    access = AdminAccess(ACCESS_KEY, SECRET_KEY)
    signed = bound(DELETE, {"topic": "orders"})
    assert access.refusal(delete_request(signed), None, NOW + 5) is None
    # The same request again: a replay.
    remark = refused_remark(access.refusal(delete_request(signed), None, NOW + 6))
    assert "Nonce 'n1' was used already: a replayed request" in remark
    # A captured UPDATE_AND_CREATE_TOPIC sent as DELETE_TOPIC_IN_NAMESRV: a code swap.
    created = bound(UPDATE_AND_CREATE_TOPIC, {"topic": "orders"}, nonce="n2")
    remark = refused_remark(access.refusal(delete_request(created), None, NOW))
    assert "is for request code 17, not 216 (a request swapped for another)" in remark
    # Older than the window (30 s unless configured), or ahead of it: stale.
    old = bound(DELETE, {"topic": "orders"}, at=NOW - 30_001, nonce="n3")
    assert "signed 30001 ms old, beyond the 30000 ms allowed" in refused_remark(
        access.refusal(delete_request(old), None, NOW))
    ahead = bound(DELETE, {"topic": "orders"}, at=NOW + 40_000, nonce="n4")
    assert "40000 ms ahead of this node's clock" in refused_remark(
        access.refusal(delete_request(ahead), None, NOW))
    # Stripping the binding breaks the signature, so a bound request cannot be downgraded.
    stripped = {k: v for k, v in signed.items() if k not in ("RequestCode", "Nonce")}
    assert "Signature does not match" in refused_remark(
        access.refusal(delete_request(stripped), None, NOW))


def test_an_unbound_signature_as_mqadmin_signs_passes_unless_refused_by_config():
    unbound = acl.sign({"topic": "orders"}, b"", ACCESS_KEY, SECRET_KEY)
    assert SecurityConfig(**SECURITY).admin_access().refusal(
        delete_request(unbound), None, NOW) is None
    strict = SecurityConfig(**SECURITY, admin_accept_unbound_signature=False).admin_access()
    remark = refused_remark(strict.refusal(delete_request(unbound), None, NOW))
    assert "binds no RequestCode, Timestamp, Nonce (admin_accept_unbound_signature" in remark
    assert strict.refusal(delete_request(bound(DELETE, {"topic": "orders"})), None, NOW) is None


def test_the_cli_signer_binds_code_time_and_nonce():
    signer = Signer(ACCESS_KEY, SECRET_KEY)
    first, second = (signer(DELETE, {"topic": "orders"}, b"") for _ in range(2))
    assert first["RequestCode"] == str(DELETE) and first["Nonce"] != second["Nonce"]
    assert acl.signature_matches(first, b"", SECRET_KEY)


def test_certificates_are_named_by_fingerprint_or_common_name():
    fingerprint = "AB:" * 31 + "CD"
    access = SecurityConfig(admin_certificates=(f"sha256:{fingerprint}",)).admin_access()
    certificate = ClientCertificate(fingerprint.replace(":", "").lower(), ("x",))
    assert access.refusal(delete_request(), certificate, NOW) is None
    with pytest.raises(ConfigError, match=r"security\.admin_certificates"):
        from_mapping(NodeConfig, {"security": {"admin_certificates": ["ops"]}})


def test_a_key_without_its_secret_is_refused_without_showing_it():
    with pytest.raises(ConfigError) as error:
        from_mapping(NodeConfig, {"security": {"admin_secret_key": "hunter2"}})
    assert "hunter2" not in str(error.value)
    assert "hunter2" not in repr(SecurityConfig(**SECURITY | {"admin_secret_key": "hunter2"}))


# -- signed requests over the in-process transport --------------------------------


async def test_admin_requests_need_the_signature_others_stay_open(temporary_node):
    async with temporary_node("ns", role="nameserver", listen="inproc://ns",
                              security=SecurityConfig(**SECURITY)), \
            temporary_node("app") as app:
        invoke = app.rpc.invoke
        remark = refused_remark(await invoke("inproc://ns", DELETE, {"topic": "orders"}))
        assert "the request carries no AccessKey and Signature" in remark
        wrong_key = acl.sign({"topic": "orders"}, b"", "intruder", SECRET_KEY)
        assert "AccessKey 'intruder' is not the admin's" in refused_remark(
            await invoke("inproc://ns", DELETE, wrong_key))
        wrong_secret = acl.sign({"topic": "orders"}, b"", ACCESS_KEY, "guess")
        assert "Signature does not match" in refused_remark(
            await invoke("inproc://ns", DELETE, wrong_secret))
        tampered = {**acl.sign({"topic": "orders"}, b"", ACCESS_KEY, SECRET_KEY),
                    "topic": "payments"}
        assert "Signature does not match" in refused_remark(
            await invoke("inproc://ns", DELETE, tampered))
        # Non-admin requests need nothing.
        answer = await invoke("inproc://ns", RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        assert answer.code == 0
        # Signed as RocketMQ signs, computed here: accepted, on the same connection.
        connection = await app.rpc.connection("inproc://ns")
        fields = {"topic": "orders", "clusterName": "DefaultCluster",
                  ACCESS_KEY_FIELD: ACCESS_KEY}
        fields[acl.SIGNATURE] = rocketmq_signature(fields, b"", SECRET_KEY)
        answer = await invoke("inproc://ns", DELETE, fields)
        assert answer.code == 0, answer.remark
        assert await app.rpc.connection("inproc://ns") is connection
        # The client's signing hook (the admin CLI's) signs every request alike.
        app.rpc.sign = Signer(ACCESS_KEY, SECRET_KEY)
        assert (await invoke("inproc://ns", DELETE, {"topic": "orders"})).code == 0


async def test_without_credentials_admin_requests_stay_open(temporary_node):
    async with temporary_node("ns", role="nameserver", listen="inproc://ns-open"), \
            temporary_node("app") as app:
        answer = await app.rpc.invoke("inproc://ns-open", DELETE, {"topic": "orders"})
        assert answer.code == 0, answer.remark


# -- the admin CLI ----------------------------------------------------------------


def controller_plugins() -> PluginManager:
    pm = PluginManager.discover(disable={"broker", "controller_dledger"})
    pm.register(triomq.plugins.broker, name="broker")
    pm.register(triomq.plugins.controller_dledger, name="controller_dledger")
    return pm


async def test_the_admin_cli_signs_with_its_options_or_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("TRIOMQ_ACCESS_KEY", raising=False)
    monkeypatch.delenv("TRIOMQ_SECRET_KEY", raising=False)
    pm = controller_plugins()
    async with open_cluster(tmp_path, controllers=1, brokers=0, plugins=pm,
                            controller={"raft": {"tick_interval_ms": 20, "fsync": False}}
                            ) as cluster:
        await cluster.start("c1", attrs.evolve(cluster.controller_config("c1"),
                                               security=SecurityConfig(**SECURITY)))
        address = cluster.controller_addresses["c1"]
        node = await cluster.start("admin")
        parser = build_parser(pm)

        async def admin(*argv: str) -> tuple[int, str]:
            node.rpc.sign = None
            args = parser.parse_args(["admin", *argv, "--controller", address])
            out = io.StringIO()
            return await controller_admin(args, node.rpc, out), out.getvalue()

        clean = ("clean-broker-metadata", "--broker-name", "broker-x")
        code, out = await admin(*clean)
        assert code == 1 and "NO_PERMISSION (16)" in out and "CLEAN_BROKER_DATA" in out
        code, out = await admin(*clean, "--access-key", ACCESS_KEY, "--secret-key", "guess")
        assert code == 1 and "Signature does not match" in out and "guess" not in out
        code, out = await admin(*clean, "--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY)
        assert code == 1 and "NO_PERMISSION" not in out  # past the guard: no such group
        monkeypatch.setenv("TRIOMQ_ACCESS_KEY", ACCESS_KEY)
        monkeypatch.setenv("TRIOMQ_SECRET_KEY", SECRET_KEY)
        code, out = await admin(*clean)
        assert code == 1 and "NO_PERMISSION" not in out
        monkeypatch.delenv("TRIOMQ_SECRET_KEY")
        with pytest.raises(ConfigError, match=r"--secret-key \(or \$TRIOMQ_SECRET_KEY\) is needed"):
            await admin(*clean)
        # Reads need nothing.
        monkeypatch.delenv("TRIOMQ_ACCESS_KEY")
        code, out = await admin("get-controller-metadata")
        assert code == 0, out


# -- mutual TLS -------------------------------------------------------------------


class Certificates:
    """A CA, the broker's certificate, an admin's and an application's client ones."""

    def __init__(self, folder: Path) -> None:
        self.ca = trustme.CA()
        self.ca_file = str(folder / "ca.pem")
        self.ca.cert_pem.write_to_path(self.ca_file)
        self.files = {}
        self.der = {}
        for name, common_name in (("server", "broker"), ("admin", "ops-admin"),
                                  ("app", "orders-app")):
            cert = self.ca.issue_cert("127.0.0.1", common_name=common_name)
            path = folder / f"{name}.pem"
            cert.private_key_and_cert_chain_pem.write_to_path(str(path))
            self.files[name] = str(path)
            self.der[name] = ssl.PEM_cert_to_DER_cert(cert.cert_chain_pems[0].bytes().decode())

    def transport(self, name: str, **extra: object) -> dict:
        return {"tcp": {"tls": {"cert": self.files[name], "ca": self.ca_file, **extra}}}


def broker_config(tmp_path: Path, certificates: Certificates, admin_fingerprint: str
                  ) -> NodeConfig:
    data = tomllib.loads(f"""
name = "b0"
role = "broker"
listen = "tcp://127.0.0.1:0"
log_level = "WARNING"
[store]
path = "{tmp_path / 'b0'}"
options = {{ segment_size = 65536 }}
[broker]
ha_listen_port = 0
flush_policy = "none"
[security]
admin_certificates = ["CN=someone-else", "sha256:{admin_fingerprint}"]
""")
    data["transport"] = {"options": certificates.transport("server", require_client_cert=True)}
    pm = PluginManager.discover(disable={"broker"})
    pm.register(triomq.plugins.broker, name="broker")
    return NodeConfig.from_mapping(data, plugins=pm)


def client_config(name: str, certificates: Certificates) -> NodeConfig:
    return NodeConfig(name=name, transport=TransportConfig(options=certificates.transport(name)))


async def test_mutual_tls_admin_certificate_passes_others_still_produce(tmp_path):
    certificates = Certificates(tmp_path)
    digest = hashlib.sha256(certificates.der["admin"]).hexdigest().upper()
    fingerprint = ":".join(digest[i:i + 2] for i in range(0, 64, 2))
    pm = PluginManager.discover(disable={"broker"})
    pm.register(triomq.plugins.broker, name="broker")
    topic = {"topic": "audit", "defaultTopic": "TBW102", "readQueueNums": "4",
             "writeQueueNums": "4", "perm": "6", "topicFilterType": "SINGLE_TAG",
             "topicSysFlag": "0", "order": "false"}
    async with open_node(broker_config(tmp_path, certificates, fingerprint), plugins=pm) as b0, \
            open_node(client_config("admin", certificates), plugins=pm) as admin, \
            open_node(client_config("app", certificates), plugins=pm) as app:
        address = b0.address
        # The application's certificate: producing works, topic changes do not.
        result = await DirectProducer(app.rpc, address).send("orders", b"hello")
        assert result.physical_offset == 0
        remark = refused_remark(await app.rpc.invoke(address, UPDATE_AND_CREATE_TOPIC, topic))
        assert "UPDATE_AND_CREATE_TOPIC (17) needs admin access" in remark
        assert f"sha256:{hashlib.sha256(certificates.der['app']).hexdigest()}" in remark
        # The admin's certificate: the topic change is made.
        answer = await admin.rpc.invoke(address, UPDATE_AND_CREATE_TOPIC, topic)
        assert answer.code == 0, answer.remark
        # And the application's connection still produces.
        result = await DirectProducer(app.rpc, address).send("audit", b"after")
        assert result.physical_offset > 0


# -- the RPC server's guard ---------------------------------------------------------


async def test_a_guard_answers_first_for_own_and_fallback_handlers() -> None:
    transport = InprocTransport(InprocNetwork("guarded-codes"), "inproc://client")
    server = RpcServer()
    seen: list[int] = []

    async def answer(request: RemotingCommand, peer: RpcConnection) -> RemotingCommand:
        return RemotingCommand.response(body=b"handled")

    def guard(request: RemotingCommand, peer: RpcConnection) -> RemotingCommand | None:
        return (RemotingCommand.response(NO_PERMISSION, remark="no")
                if request.ext_fields.get("who") != "admin" else None)

    server.register_fallback(216, answer, inline=True)
    server.observe(216, lambda request, peer: seen.append(request.code))
    server.guard([216, 17], guard)
    with pytest.raises(ValueError, match="already have a guard"):
        server.guard([17], guard)
    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.serve, await transport.listen("inproc://server"))
        connection = RpcConnection(await transport.connect(address))
        await nursery.start(connection.run)
        assert (await connection.invoke(216)).code == NO_PERMISSION
        assert seen == []  # refused before the observers
        assert (await connection.invoke(216, {"who": "admin"})).body == b"handled"
        server.register(17, answer)  # registered after the guard: guarded too
        assert (await connection.invoke(17)).code == NO_PERMISSION
        assert (await connection.invoke(17, {"who": "admin"})).body == b"handled"
        assert seen == [216]
        nursery.cancel_scope.cancel()


# -- the CLI over mutual TLS ----------------------------------------------------------

TRIOMQ = [sys.executable, "-c", "import sys; from triomq.cli import main; sys.exit(main())"]


def tls_node(certificates: Certificates, name: str, body: str) -> NodeConfig:
    data = tomllib.loads(body)
    data["transport"] = {"options": certificates.transport(name, require_client_cert=True)}
    return NodeConfig.from_mapping(data)


def client_file(path: Path, certificates: Certificates, name: str, security: str = "") -> Path:
    path.write_text(f'name = "{name}"\n[transport.options.tcp.tls]\n'
                    f'cert = "{certificates.files[name]}"\nca = "{certificates.ca_file}"\n'
                    f'{security}')
    return path


async def run_cli(*argv: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("TRIOMQ_")}
    done = await trio.run_process([*TRIOMQ, *argv], capture_stdout=True, capture_stderr=True,
                                  check=False, env={**environ, **(env or {})})
    return done.returncode, done.stdout.decode() + done.stderr.decode()


async def test_the_cli_connects_over_mutual_tls_and_signs_with_a_node_file(tmp_path):
    certificates = Certificates(tmp_path)
    ns = tls_node(certificates, "server", f"""
name = "ns"
role = "nameserver"
listen = "tcp://127.0.0.1:{free_tcp_port()}"
log_level = "WARNING"
""")
    broker = tls_node(certificates, "server", f"""
name = "b0"
role = "broker"
listen = "tcp://127.0.0.1:{free_tcp_port()}"
log_level = "WARNING"
[store]
path = "{tmp_path / 'b0'}"
[broker]
ha_listen_port = {free_tcp_port()}
flush_policy = "none"
namesrv_addr = ["{ns.listen}"]
[security]
admin_access_key = "{ACCESS_KEY}"
admin_secret_key = "{SECRET_KEY}"
""")
    app = client_file(tmp_path / "app.toml", certificates, "app")
    ops = client_file(tmp_path / "ops.toml", certificates, "admin",
                      f'[security]\nadmin_access_key = "{ACCESS_KEY}"\n'
                      f'admin_secret_key = "{SECRET_KEY}"\n')
    namesrv = ns.listen.removeprefix("tcp://")
    create = ("admin", "update-topic", "-n", namesrv, "-b", broker.listen.removeprefix("tcp://"),
              "-t", "audit")
    async with open_node(ns), open_node(broker):
        # No certificate: the name server's TLS port cannot be reached.
        code, out = await run_cli("produce", "-n", namesrv, "-t", "audit", "--timeout", "2")
        assert code == 2, out
        # The application's certificate, no admin credentials: refused by the broker.
        code, out = await run_cli(*create, "--client-config", str(app))
        assert code == 1 and "code 16" in out and "needs admin access" in out, out
        # The admin's file, from the environment: its [security] keys sign the change.
        code, out = await run_cli(*create, env={"TRIOMQ_CLIENT_CONFIG": str(ops)})
        assert code == 0, out
        code, out = await run_cli("produce", "-n", namesrv, "-t", "audit", "--count", "3",
                                 "--json", "--client-config", str(app))
        assert code == 0, out
        assert [r["sendStatus"] for r in json.loads(out)["results"]] == ["SEND_OK"] * 3
        code, out = await run_cli("consume", "-n", namesrv, "-t", "audit", "-g", "auditors",
                                 "--from-beginning", "--count", "3", "--json",
                                 "--client-config", str(app))
        assert code == 0, out
        bodies = sorted(base64.b64decode(json.loads(line)["body"]) for line in out.splitlines()
                        if line.startswith("{"))
        assert bodies == [f"Hello triomq {i}".encode() for i in range(3)]


async def test_a_wrong_client_config_is_one_line_naming_the_key(tmp_path):
    wrong = tmp_path / "wrong.toml"
    wrong.write_text('[transport.options.tcp.tls]\nkey = "k.pem"\n')
    code, out = await run_cli("produce", "-n", "127.0.0.1:1", "-t", "T",
                              "--client-config", str(wrong))
    assert (code, out) == (2, "triomq: error: transport.options.tcp.tls: 'key' given without "
                              "'cert'\n")
    wrong.write_text('[transport]\ntls = true\n')
    code, out = await run_cli("admin", "topic-list", "-n", "127.0.0.1:1",
                              env={"TRIOMQ_CLIENT_CONFIG": str(wrong)})
    assert code == 2 and out.startswith(f"triomq: error: --client-config {wrong}: ") and \
        "unknown key 'tls'" in out, out
