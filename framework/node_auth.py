"""Nodes authenticate each other: the credential of a cluster-internal request (pure).

With ``[security] inner_client_access_key`` and its secret set, every
request one node sends another (``INTERNAL_CODES``: broker registrations
and heartbeats to name servers and controllers, SyncStateSet changes,
elections a broker asks for, role notices, Raft messages between
controllers) and every HA handshake carries a credential in extFields
beside the request's own, as RocketMQ's ACL adds its own::

    AccessKey    the cluster's access key (RocketMQ's innerClientAuthenticationCredentials)
    RequestCode  the request's code, so a captured request is no other request
    Sender       who signs: the node's name (an HA slave: its broker id)
    Timestamp    when, in ms since the epoch (the sender's wall clock)
    Nonce        a value the sender never uses twice
    Signature    RocketMQ's ACL signature of all of them and the body (``triomq.protocol.acl``)

The receiver refuses (NO_PERMISSION, a remark naming what is wrong) a
request without a credential, with a wrong key or signature, signed for
another code, signed further than ``window_ms`` from its own clock, or
whose nonce it saw already: the nonces of the last two windows are kept,
and an older request is refused as stale, so the cache holds what the
cluster signs in that time and no more. Each node keeps its own cache: a
request captured on its way to one node could still be shown once to
another within the window (a signature names no receiver), which is what
TLS between the nodes is for.

``check_binding`` is shared with the admin signature (``triomq.admin_access``),
which binds the code, a time and a nonce the same way. Nothing here sees a
clock, a socket or a random source: ``now_ms`` and the nonce come in.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

import attrs

from triomq.protocol import acl
from triomq.protocol.remoting import RemotingCommand

__all__ = ["DEFAULT_WINDOW_MS", "ELECT_MASTER", "HA_HANDSHAKE", "INTERNAL_CODES", "NONCE",
           "NO_PERMISSION", "REQUEST_CODE", "SENDER", "TIMESTAMP", "InnerAuth", "NonceCache",
           "check_binding", "designates_replica", "is_internal"]

NO_PERMISSION = 16
REQUEST_CODE = "RequestCode"
SENDER = "Sender"
TIMESTAMP = "Timestamp"
NONCE = "Nonce"
#: How far a signed request's time may be from the receiver's clock unless configured.
DEFAULT_WINDOW_MS = 30_000
#: Longest nonce accepted: a sender's 128 random bits in hex take 32.
MAX_NONCE = 64

#: The code an HA handshake's credential is signed for: no remoting request's, so
#: neither can stand for the other.
HA_HANDSHAKE = -1

#: ELECT_MASTER: internal unless an administrator designates the replica (then admin).
ELECT_MASTER = 1002

#: Requests only nodes send each other, by RocketMQ's codes (DLedger's for Raft).
INTERNAL_CODES: Mapping[int, str] = {
    103: "REGISTER_BROKER",
    104: "UNREGISTER_BROKER",
    322: "QUERY_DATA_VERSION",
    904: "BROKER_HEARTBEAT",
    905: "NOTIFY_MIN_BROKER_ID_CHANGE",
    906: "EXCHANGE_BROKER_HA_INFO",
    1001: "CONTROLLER_ALTER_SYNC_STATE_SET",
    ELECT_MASTER: "CONTROLLER_ELECT_MASTER",
    1003: "CONTROLLER_REGISTER_BROKER",
    1008: "NOTIFY_BROKER_ROLE_CHANGED",
    1013: "CONTROLLER_APPLY_BROKER_ID",
    51001: "DLEDGER_VOTE",
    51002: "DLEDGER_HEART_BEAT",
    51004: "DLEDGER_PUSH",
    51005: "DLEDGER_LEADERSHIP_TRANSFER",
    51006: "DLEDGER_INSTALL_SNAPSHOT",
}


def designates_replica(ext_fields: Mapping[str, str] | None) -> bool:
    """Whether an ELECT_MASTER names the replica to elect (an administrator's)."""
    return ext_fields is not None and ext_fields.get("designateElect") == "true"


def is_internal(code: int, ext_fields: Mapping[str, str] | None) -> bool:
    """Whether a request with ``code`` and ``ext_fields`` is one only nodes send."""
    if code == ELECT_MASTER:
        return not designates_replica(ext_fields)
    return code in INTERNAL_CODES


class NonceCache:
    """The nonces accepted in the last two windows, in the order they came.

    A request is accepted only within ``window_ms`` of its timestamp, and its
    timestamp only within ``window_ms`` of the receiver's clock, so a nonce
    older than ``2 * window_ms`` cannot come back and be accepted: it is
    forgotten then.
    """

    def __init__(self, window_ms: int) -> None:
        if window_ms <= 0:
            raise ValueError(f"window_ms must be positive, got {window_ms}")
        self.window_ms = window_ms
        self._expiry: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._expiry)

    def __contains__(self, nonce: str) -> bool:
        return nonce in self._expiry

    def add(self, nonce: str, now_ms: int) -> None:
        """Remember ``nonce`` (accepted at ``now_ms``) and forget the expired ones."""
        # Insertion order is expiry order while the clock goes forward; a clock
        # set back only keeps some nonces a while longer.
        while self._expiry:
            oldest, until = next(iter(self._expiry.items()))
            if until > now_ms:
                break
            del self._expiry[oldest]
        self._expiry[nonce] = now_ms + 2 * self.window_ms


def check_binding(fields: Mapping[str, str], code: int, now_ms: int,
                  nonces: NonceCache) -> str | None:
    """Why a signed request's binding fails (``None``: it holds, and its nonce is kept).

    Call it once the signature over ``fields`` verified: only then do the
    fields say what the signer meant, and only then is the nonce worth keeping.
    """
    missing = [name for name in (REQUEST_CODE, TIMESTAMP, NONCE) if not fields.get(name)]
    if missing:
        return f"the signature binds no {', '.join(missing)}"
    signed_code = fields[REQUEST_CODE]
    if signed_code != str(code):
        return (f"the signature is for request code {signed_code[:16]}, not {code} "
                "(a request swapped for another)")
    try:
        stamp = int(fields[TIMESTAMP])
    except ValueError:
        return f"{TIMESTAMP} {fields[TIMESTAMP][:32]!r} is not ms since the epoch"
    skew = now_ms - stamp
    if abs(skew) > nonces.window_ms:
        when = "old" if skew > 0 else "ahead of this node's clock"
        return (f"signed {abs(skew)} ms {when}, beyond the {nonces.window_ms} ms allowed "
                "(clock_skew_window_ms): stale or replayed")
    nonce = fields[NONCE]
    if len(nonce) > MAX_NONCE:
        return f"{NONCE} is {len(nonce)} characters, more than {MAX_NONCE}"
    if nonce in nonces:
        return f"{NONCE} {nonce!r} was used already: a replayed request"
    nonces.add(nonce, now_ms)
    return None


@attrs.define(eq=False)
class InnerAuth:
    """A node's cluster credential: signs what it sends, checks what it receives.

    ``identity`` names the node in what it signs (the HA slave signs with its
    broker id instead, which the master checks against its handshake).
    """

    access_key: str
    secret_key: str = attrs.field(repr=False)
    identity: str
    nonces: NonceCache

    def sign(self, code: int, ext_fields: Mapping[str, str] | None, body: bytes, *,
             now_ms: int, nonce: str, sender: str | None = None) -> dict[str, str]:
        """``ext_fields`` with the credential of a request ``code`` with ``body`` added."""
        fields = {**(ext_fields or {}), REQUEST_CODE: str(code),
                  SENDER: self.identity if sender is None else sender,
                  TIMESTAMP: str(now_ms), NONCE: nonce}
        return acl.sign(fields, body, self.access_key, self.secret_key)

    def why_not(self, code: int, fields: Mapping[str, str], body: bytes,
                now_ms: int) -> str | None:
        """Why a request does not carry this cluster's credential (``None``: it does)."""
        given = fields.get(acl.ACCESS_KEY)
        if given is None or acl.SIGNATURE not in fields:
            return (f"it carries no {acl.ACCESS_KEY} and {acl.SIGNATURE}: nodes sign their "
                    "requests with [security] inner_client_access_key and its secret")
        if not hmac.compare_digest(given.encode("utf-8", "replace"),
                                   self.access_key.encode("utf-8")):
            return f"{acl.ACCESS_KEY} {given[:64]!r} is not the cluster's"
        if not acl.signature_matches(fields, body, self.secret_key):
            return (f"the {acl.SIGNATURE} does not match the request signed with the "
                    "cluster's secret key")
        return check_binding(fields, code, now_ms, self.nonces)

    def refusal(self, request: RemotingCommand, now_ms: int) -> RemotingCommand | None:
        """NO_PERMISSION for an internal request without the cluster's credential."""
        remark = self.why_not(request.code, request.ext_fields, request.body, now_ms)
        if remark is None:
            return None
        name = INTERNAL_CODES.get(request.code, str(request.code))
        sender = request.ext_fields.get(SENDER)
        claimed = f" (signed by {sender[:64]!r})" if sender else ""
        return RemotingCommand.response(
            NO_PERMISSION,
            remark=f"{name} ({request.code}) is cluster-internal{claimed}: {remark}")

    def handshake_credential(self, broker_id: int, *, now_ms: int,
                             nonce: str) -> dict[str, str]:
        """What the HA slave ``broker_id`` sends before its handshake."""
        return self.sign(HA_HANDSHAKE, None, b"", now_ms=now_ms, nonce=nonce,
                         sender=str(broker_id))

    def handshake_refusal(self, credential: Mapping[str, str] | None, broker_id: int,
                          now_ms: int) -> str | None:
        """Why an HA handshake naming ``broker_id`` is not that slave's (``None``: it is)."""
        if credential is None:
            return (f"the handshake of slave {broker_id} came without a credential frame "
                    "([security] inner_client_access_key is set on the master)")
        why = self.why_not(HA_HANDSHAKE, credential, b"", now_ms)
        if why is not None:
            return f"the credential of slave {broker_id}'s handshake: {why}"
        signer = credential.get(SENDER, "")
        if signer != str(broker_id):
            return (f"the handshake names slave {broker_id} but its credential was signed "
                    f"for {signer[:64]!r}")
        return None
