"""Who may send admin requests: the rule every role's RPC server applies.

Admin requests change what a cluster is, not what it carries: topic and
subscription-group changes, consumer-offset resets and a consumer's
re-consumption of a stored message, broker and name-server configuration, the
name server's KV and write-permission commands, the controller's
configuration, broker-data cleaning and an administrator's designated
election (ELECT_MASTER with ``designateElect``; a broker's own election
request stays open); and triomq's view of a broker's pending messages
(GET_PENDING_MESSAGES). ``ADMIN_CODES`` lists them by their codes.

With credentials configured (``[security]``), an admin request passes when
it comes over mutual TLS with a client certificate the configuration names
(``sha256:<fingerprint>`` or ``CN=<common name>``), or when it is signed
with the admin's access key and secret key as RocketMQ's ACL signs
(``triomq.protocol.acl``). A signature that binds the request's code, a
time and a nonce (``RequestCode``, ``Timestamp``, ``Nonce`` among the
signed fields, as the triomq CLI signs) passes only for that code, within
the clock-skew window and once (``triomq.node_auth.check_binding``); one
that binds none of them, as RocketMQ's mqadmin signs, passes while
``accept_unbound`` (``admin_accept_unbound_signature``) says so.
Otherwise it is answered NO_PERMISSION (16) with a remark saying which
credential is missing or wrong; the secret is never in it. Every other
request (sends, pulls, routes, heartbeats) stays open to anonymous clients,
but for the cluster-internal ones when nodes authenticate each other
(``triomq.node_auth``). With no credential configured everything stays open.

``AdminAccess.refusal`` is the whole decision; the node's RPC server asks
it before any handler of an admin code runs. Nothing here sees a clock or
a socket: the pump hands in the peer's certificate as ``ClientCertificate``
and the time.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Iterable, Mapping

import attrs

from triomq.node_auth import (
    DEFAULT_WINDOW_MS,
    ELECT_MASTER,
    NO_PERMISSION,
    NONCE,
    REQUEST_CODE,
    TIMESTAMP,
    NonceCache,
    check_binding,
    designates_replica,
)
from triomq.protocol import acl
from triomq.protocol.remoting import RemotingCommand

__all__ = ["ADMIN_CODES", "NO_PERMISSION", "AdminAccess", "ClientCertificate",
           "check_certificate_name", "is_admin_request"]

#: The fields by which a signature binds its request's code, a time and a nonce.
BOUND_FIELDS = (REQUEST_CODE, TIMESTAMP, NONCE)

#: The admin requests, by RocketMQ's request codes.
ADMIN_CODES: Mapping[int, str] = {
    17: "UPDATE_AND_CREATE_TOPIC",
    18: "UPDATE_AND_CREATE_TOPIC_LIST",
    25: "UPDATE_BROKER_CONFIG",
    100: "PUT_KV_CONFIG",
    102: "DELETE_KV_CONFIG",
    200: "UPDATE_AND_CREATE_SUBSCRIPTIONGROUP",
    205: "WIPE_WRITE_PERM_OF_BROKER",
    207: "DELETE_SUBSCRIPTIONGROUP",
    215: "DELETE_TOPIC_IN_BROKER",
    216: "DELETE_TOPIC_IN_NAMESRV",
    217: "REGISTER_TOPIC_IN_NAMESRV",
    222: "INVOKE_BROKER_TO_RESET_OFFSET",
    225: "UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST",
    309: "CONSUME_MESSAGE_DIRECTLY",
    318: "UPDATE_NAMESRV_CONFIG",
    327: "ADD_WRITE_PERM_OF_BROKER",
    513: "UPDATE_AND_CREATE_STATIC_TOPIC",
    ELECT_MASTER: "CONTROLLER_ELECT_MASTER",
    1009: "UPDATE_CONTROLLER_CONFIG",
    1011: "CLEAN_BROKER_DATA",
    # triomq's own: what waits in a broker's system topics (their messages' ids, topics
    # and producer groups) is for the admin alone.
    7001: "GET_PENDING_MESSAGES",
}

_FINGERPRINT = re.compile(r"sha256:((?:[0-9a-fA-F]{2}:?){31}[0-9a-fA-F]{2})", re.ASCII)


def is_admin_request(request: RemotingCommand) -> bool:
    """Whether ``request`` needs admin access."""
    if request.code == ELECT_MASTER:  # an admin request only when it designates the replica
        return designates_replica(request.ext_fields)
    return request.code in ADMIN_CODES


@attrs.frozen
class ClientCertificate:
    """The certificate a client presented over TLS: its SHA-256 (lowercase hex) and the
    common names of its subject."""

    sha256: str
    common_names: tuple[str, ...] = ()

    def names(self) -> frozenset[str]:
        """How the configuration may name this certificate."""
        return frozenset({f"sha256:{self.sha256}",
                          *(f"CN={name}" for name in self.common_names)})


def check_certificate_name(name: str) -> str | None:
    """Why ``name`` cannot name a certificate (``None``: it can)."""
    if _FINGERPRINT.fullmatch(name) or (name.startswith("CN=") and len(name) > 3):
        return None
    return ("expected 'sha256:' and the certificate's SHA-256 fingerprint in hex (colons "
            "allowed), or 'CN=' and its subject's common name")


def _canonical(names: Iterable[str]) -> frozenset[str]:
    """Fingerprints as ``ClientCertificate.names`` writes them: lowercase, no colons."""
    canonical = set()
    for name in names:
        match = _FINGERPRINT.fullmatch(name)
        canonical.add(f"sha256:{match.group(1).replace(':', '').lower()}" if match else name)
    return frozenset(canonical)


@attrs.frozen
class AdminAccess:
    """The admin credentials a node accepts (see the module docstring).

    ``access_key`` and ``secret_key``: RocketMQ ACL signing; ``certificates``:
    names of admin client certificates. ``enabled`` is false when none is
    configured, and then every request passes.
    """

    access_key: str = ""
    secret_key: str = attrs.field(default="", repr=False)
    certificates: frozenset[str] = attrs.field(default=frozenset(), converter=_canonical)
    accept_unbound: bool = True
    nonces: NonceCache = attrs.field(factory=lambda: NonceCache(DEFAULT_WINDOW_MS), eq=False,
                                     repr=False)

    @property
    def enabled(self) -> bool:
        return bool(self.access_key or self.certificates)

    def refusal(self, request: RemotingCommand, certificate: ClientCertificate | None,
                now_ms: int) -> RemotingCommand | None:
        """NO_PERMISSION for an admin request without an admin's credential, else ``None``.

        ``now_ms`` is the node's wall clock, for a signature's time.
        """
        if not self.enabled or not is_admin_request(request):
            return None
        remark = self._why_not(request, certificate, now_ms)
        if remark is None:
            return None
        name = ADMIN_CODES[request.code]
        return RemotingCommand.response(
            NO_PERMISSION, remark=f"{name} ({request.code}) needs admin access: {remark}")

    def _why_not(self, request: RemotingCommand, certificate: ClientCertificate | None,
                 now_ms: int) -> str | None:
        reasons = []
        if self.certificates:
            if certificate is None:
                reasons.append("no client certificate (mutual TLS) was presented")
            elif certificate.names() & self.certificates:
                return None
            else:
                reasons.append(f"the client certificate sha256:{certificate.sha256} is not "
                               "an admin's")
        if self.access_key:
            fields = request.ext_fields
            given = fields.get(acl.ACCESS_KEY)
            if given is None or acl.SIGNATURE not in fields:
                reasons.append(f"the request carries no {acl.ACCESS_KEY} and {acl.SIGNATURE} "
                               "(sign it with the admin's access key and secret key)")
            elif not hmac.compare_digest(given.encode("utf-8", "replace"),
                                         self.access_key.encode("utf-8")):
                reasons.append(f"{acl.ACCESS_KEY} {given[:64]!r} is not the admin's")
            elif not acl.signature_matches(fields, request.body, self.secret_key):
                reasons.append(f"the {acl.SIGNATURE} does not match the request signed with "
                               "the admin's secret key")
            elif any(name in fields for name in BOUND_FIELDS):
                why = check_binding(fields, request.code, now_ms, self.nonces)
                if why is None:
                    return None
                reasons.append(why)
            elif not self.accept_unbound:
                reasons.append(f"the signature binds no {', '.join(BOUND_FIELDS)} "
                               "(admin_accept_unbound_signature is false)")
            else:
                return None
        return "; ".join(reasons)
