"""RocketMQ's ACL request signature: how a client proves it holds a secret key.

A signed request carries two more ``extFields``: ``AccessKey`` (who signs)
and ``Signature``. The signature is HMAC-SHA1, keyed with the secret key
(UTF-8), over the values of every extField but ``Signature`` (``AccessKey``
and an optional ``SecurityToken`` included), concatenated in the order of
their keys and encoded as UTF-8, followed by the body; it travels base64
encoded. Keys sort as Java's ``TreeMap`` sorts strings, by UTF-16 code
unit, so a request signed by RocketMQ's ``AclClientRPCHook`` (mqadmin with
an accessKey and secretKey) verifies here, and the other way round.

``sign`` is the client's side (the admin CLI), ``signature_matches`` the
server's (``triomq.admin_access``). Nothing here sees a clock or a socket.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping

__all__ = ["ACCESS_KEY", "SECURITY_TOKEN", "SIGNATURE", "sign", "signature",
           "signature_matches", "signed_content"]

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"


def _java_order(key: str) -> bytes:
    # Big-endian UTF-16 compares byte by byte as Java compares code units; it
    # differs from code-point order only past the basic plane.
    return key.encode("utf-16-be", "surrogatepass")


def signed_content(fields: Mapping[str, str], body: bytes) -> bytes:
    """The bytes a signature covers: the fields' values by key order, then the body."""
    text = "".join(fields[key] for key in sorted(fields, key=_java_order) if key != SIGNATURE)
    # Java's encoder writes '?' for what UTF-8 cannot hold (a lone surrogate), as "replace" does.
    return text.encode("utf-8", "replace") + bytes(body)


def signature(content: bytes, secret_key: str) -> str:
    """Base64 of HMAC-SHA1 over ``content`` keyed with ``secret_key``."""
    digest = hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def sign(fields: Mapping[str, str] | None, body: bytes, access_key: str,
         secret_key: str) -> dict[str, str]:
    """``fields`` with ``AccessKey`` and the ``Signature`` over them and ``body`` added."""
    signed = {**(fields or {}), ACCESS_KEY: access_key}
    signed[SIGNATURE] = signature(signed_content(signed, body), secret_key)
    return signed


def signature_matches(fields: Mapping[str, str], body: bytes, secret_key: str) -> bool:
    """Whether ``fields`` carry a ``Signature`` made with ``secret_key`` over this request."""
    given = fields.get(SIGNATURE)
    if given is None:
        return False
    expected = signature(signed_content(fields, body), secret_key)
    # Compared in constant time, so the answer's timing tells nothing of the right one.
    return hmac.compare_digest(expected.encode("ascii"), given.encode("utf-8", "replace"))
