"""Nodes authenticate each other: the pure rule (``triomq.node_auth``), no event loop.

Each request signed here is checked by a second ``InnerAuth`` holding the
same secret, as another node would; times are explicit ``now_ms`` values.
"""

from __future__ import annotations

import pytest

from triomq.config import SecurityConfig
from triomq.errors import ConfigError
from triomq.node_auth import INTERNAL_CODES, InnerAuth, NonceCache, is_internal
from triomq.protocol import acl
from triomq.protocol.ha import Credential, SlaveFrameDecoder, SlaveHandshake, encode
from triomq.protocol.remoting import RemotingCommand

SECRET = "cluster-secret"
NOW = 1_700_000_000_000
REGISTER_BROKER, ALTER_SYNC_STATE_SET, UNREGISTER_BROKER = 103, 1001, 104
NO_PERMISSION = 16


def auth(identity: str, secret: str = SECRET, window_ms: int = 30_000) -> InnerAuth:
    return InnerAuth("cluster", secret, identity, NonceCache(window_ms))


def request(code: int, fields: dict[str, str], body: bytes = b"") -> RemotingCommand:
    return RemotingCommand.request(code, fields, body)


def refused(answer: RemotingCommand | None) -> str:
    assert answer is not None and answer.code == NO_PERMISSION
    assert SECRET not in (answer.remark or "")
    return answer.remark or ""


def test_a_signed_request_passes_once_and_only_as_itself() -> None:
    broker, namesrv = auth("broker-a-0"), auth("ns")
    fields = broker.sign(REGISTER_BROKER, {"brokerName": "broker-a"}, b"topics",
                         now_ms=NOW, nonce="a1")
    assert fields["Sender"] == "broker-a-0" and fields["RequestCode"] == "103"
    assert namesrv.refusal(request(REGISTER_BROKER, fields, b"topics"), NOW + 20) is None
    # Replayed within the window.
    remark = refused(namesrv.refusal(request(REGISTER_BROKER, fields, b"topics"), NOW + 40))
    assert remark == ("REGISTER_BROKER (103) is cluster-internal (signed by 'broker-a-0'): "
                      "Nonce 'a1' was used already: a replayed request")
    # Replayed after it: stale.
    remark = refused(namesrv.refusal(request(REGISTER_BROKER, fields, b"topics"),
                                     NOW + 30_001))
    assert "signed 30001 ms old, beyond the 30000 ms allowed (clock_skew_window_ms)" in remark
    # Its code swapped (a registration sent as an unregistration).
    swapped = broker.sign(REGISTER_BROKER, {"brokerName": "broker-a"}, b"", now_ms=NOW,
                          nonce="a2")
    remark = refused(namesrv.refusal(request(UNREGISTER_BROKER, swapped), NOW))
    assert "the signature is for request code 103, not 104 (a request swapped" in remark
    # Its body swapped, or a field.
    other_body = broker.sign(REGISTER_BROKER, {}, b"topics", now_ms=NOW, nonce="a3")
    assert "Signature does not match" in refused(
        namesrv.refusal(request(REGISTER_BROKER, other_body, b"forged"), NOW))
    other_field = {**broker.sign(REGISTER_BROKER, {"brokerId": "1"}, b"", now_ms=NOW,
                                 nonce="a4"), "brokerId": "0"}
    assert "Signature does not match" in refused(
        namesrv.refusal(request(REGISTER_BROKER, other_field), NOW))


def test_unsigned_and_wrongly_signed_requests_are_refused() -> None:
    namesrv = auth("ns")
    remark = refused(namesrv.refusal(request(REGISTER_BROKER, {"brokerName": "x"}), NOW))
    assert remark == ("REGISTER_BROKER (103) is cluster-internal: it carries no AccessKey and "
                      "Signature: nodes sign their requests with [security] "
                      "inner_client_access_key and its secret")
    guessed = auth("forger", secret="guess").sign(ALTER_SYNC_STATE_SET, {}, b"", now_ms=NOW,
                                                  nonce="f1")
    assert "the Signature does not match the request signed with the cluster's secret" in (
        refused(namesrv.refusal(request(ALTER_SYNC_STATE_SET, guessed), NOW)))
    other_key = {**guessed, "AccessKey": "admin"}
    assert "AccessKey 'admin' is not the cluster's" in refused(
        namesrv.refusal(request(ALTER_SYNC_STATE_SET, other_key), NOW))
    # Signed as an admin signs (RocketMQ's ACL alone, with the cluster's secret even):
    # no code, time or nonce bound.
    unbound = acl.sign({}, b"", "cluster", SECRET)
    assert "the signature binds no RequestCode, Timestamp, Nonce" in refused(
        namesrv.refusal(request(ALTER_SYNC_STATE_SET, unbound), NOW))


def test_a_refused_request_does_not_use_up_its_nonce() -> None:
    broker, controller = auth("b"), auth("c")
    fields = broker.sign(REGISTER_BROKER, {}, b"", now_ms=NOW, nonce="n")
    # The same nonce under a forged signature first: refused, and nothing kept.
    forged = {**fields, "Signature": "AAAA"}
    refused(controller.refusal(request(REGISTER_BROKER, forged), NOW))
    assert controller.refusal(request(REGISTER_BROKER, fields), NOW) is None


def test_the_nonce_cache_holds_two_windows_and_no_more() -> None:
    cache = NonceCache(1_000)
    for i in range(4):
        cache.add(f"n{i}", NOW + i * 500)
    # n0 (kept until NOW + 2000) is gone once a nonce comes at NOW + 2000.
    assert len(cache) == 4 and "n0" in cache
    cache.add("n4", NOW + 2_000)
    assert "n0" not in cache and "n1" in cache and len(cache) == 4
    cache.add("late", NOW + 10_000)
    assert len(cache) == 1


def test_which_requests_are_internal() -> None:
    assert is_internal(REGISTER_BROKER, {}) and is_internal(51002, None)
    assert not is_internal(310, {})  # SEND_MESSAGE_V2: the put path is not signed
    assert not is_internal(11, {})  # PULL_MESSAGE
    assert is_internal(1002, {"designateElect": "false"})
    assert not is_internal(1002, {"designateElect": "true"})  # an admin's, not a node's
    assert INTERNAL_CODES[904] == "BROKER_HEARTBEAT"


# -- the HA handshake --------------------------------------------------------------------


def test_an_ha_handshake_proves_its_slave() -> None:
    slave, master = auth("b1"), auth("b0")
    credential = slave.handshake_credential(2, now_ms=NOW, nonce="h1")
    assert master.handshake_refusal(credential, 2, NOW) is None
    assert "was used already" in (master.handshake_refusal(credential, 2, NOW) or "")
    # Another slave's credential on a handshake naming this one.
    other = slave.handshake_credential(3, now_ms=NOW, nonce="h2")
    assert master.handshake_refusal(other, 2, NOW) == (
        "the handshake names slave 2 but its credential was signed for '3'")
    assert "came without a credential frame" in (master.handshake_refusal(None, 2, NOW) or "")
    # A remoting request's credential is no handshake's.
    remoting = slave.sign(REGISTER_BROKER, {}, b"", now_ms=NOW, nonce="h3", sender="2")
    assert "is for request code 103, not -1" in (
        master.handshake_refusal(remoting, 2, NOW) or "")


def test_the_credential_frame_travels_before_the_handshake() -> None:
    credential = auth("b1").handshake_credential(1, now_ms=NOW, nonce="x")
    frame = Credential(tuple(sorted(credential.items())))
    data = encode(frame) + encode(SlaveHandshake(1))
    decoder = SlaveFrameDecoder()
    frames = [f for i in range(len(data)) for f in decoder.feed(data[i:i + 1])]
    assert frames == [frame, SlaveHandshake(1)]
    assert frames[0].mapping() == credential


@pytest.mark.parametrize(("raw", "error"), [
    (b"\x00\x00\x00\x64\x00\x00\x00\x00", "bodySize 0 out of range [1, 2048]"),
    (b"\x00\x00\x00\x64\x00\x01\x00\x00", "bodySize 65536 out of range [1, 2048]"),
    (b"\x00\x00\x00\x64\x00\x00\x00\x02[]", "not a JSON object of strings"),
    (b"\x00\x00\x00\x64\x00\x00\x00\x02{x", "not JSON"),
])
def test_a_malformed_credential_frame_fails_the_decoder(raw: bytes, error: str) -> None:
    with pytest.raises(ValueError) as failure:
        SlaveFrameDecoder().feed(raw)
    assert str(failure.value).startswith("HA frame credential")
    assert error in str(failure.value)


# -- configuration -----------------------------------------------------------------------


def test_the_secret_comes_from_the_config_a_file_or_the_environment(tmp_path) -> None:
    assert SecurityConfig().inner_auth("n") is None
    given = SecurityConfig(inner_client_access_key="k", inner_client_secret_key="s1")
    assert given.inner_auth("n", environ={}).secret_key == "s1"  # type: ignore[union-attr]
    path = tmp_path / "secret"
    path.write_text("s2\n")
    from_file = SecurityConfig(inner_client_access_key="k", inner_client_secret_file=str(path))
    assert from_file.inner_auth("n", environ={}).secret_key == "s2"  # type: ignore[union-attr]
    from_env = SecurityConfig(inner_client_access_key="k")
    inner = from_env.inner_auth("n", environ={"TRIOMQ_INNER_CLIENT_SECRET_KEY": "s3"})
    assert inner is not None and inner.secret_key == "s3" and inner.identity == "n"
    with pytest.raises(ConfigError, match="no secret: set inner_client_secret_file"):
        from_env.inner_auth("n", environ={})
    missing = SecurityConfig(inner_client_access_key="k",
                             inner_client_secret_file=str(tmp_path / "none"))
    with pytest.raises(ConfigError, match="cannot read the cluster's secret"):
        missing.inner_auth("n", environ={})
    with pytest.raises(ConfigError, match="without inner_client_access_key"):
        SecurityConfig(inner_client_secret_key="s")
    with pytest.raises(ConfigError) as error:
        SecurityConfig(inner_client_access_key="k", inner_client_secret_key="hunter2",
                       inner_client_secret_file=str(path))
    assert "hunter2" not in str(error.value)
