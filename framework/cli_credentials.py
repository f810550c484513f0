"""The admin tools' credentials: ``--access-key`` / ``--secret-key`` or the environment.

Every ``triomq admin`` command takes them (each role plugin's commands add
them with ``add_credential_options``); given, every request the command
sends is signed as RocketMQ's ACL signs (``triomq.protocol.acl``), the
signature binding the request's code, the time and a nonce, which a
node with ``[security] admin_access_key`` requires of admin requests. The
environment variables ``TRIOMQ_ACCESS_KEY`` and ``TRIOMQ_SECRET_KEY`` keep
the secret off the command line (and out of the process list), as does a
``--client-config`` file's ``[security]`` (``triomq.cli_connection``).
"""

from __future__ import annotations

import argparse
import os
import secrets
import time
from collections.abc import Mapping

import attrs

from triomq.cli_connection import add_client_config_option, client_security
from triomq.errors import ConfigError
from triomq.node_auth import NONCE, REQUEST_CODE, TIMESTAMP
from triomq.protocol import acl
from triomq.rpc import RpcClient

__all__ = ["ACCESS_KEY_ENV", "SECRET_KEY_ENV", "Signer", "add_credential_options",
           "sign_requests"]

ACCESS_KEY_ENV = "TRIOMQ_ACCESS_KEY"
SECRET_KEY_ENV = "TRIOMQ_SECRET_KEY"


@attrs.frozen
class Signer:
    """Signs requests with an access key and its secret key (``RpcClient.sign``)."""

    access_key: str
    secret_key: str = attrs.field(repr=False)

    def __call__(self, code: int, ext_fields: Mapping[str, str] | None,
                 body: bytes) -> dict[str, str]:
        # Bound to its code, a time and a nonce, a captured request is no other
        # request and cannot be sent again (``triomq.node_auth.check_binding``).
        bound = {**(ext_fields or {}), REQUEST_CODE: str(code),
                 TIMESTAMP: str(time.time_ns() // 1_000_000), NONCE: secrets.token_hex(16)}
        return acl.sign(bound, body, self.access_key, self.secret_key)


def add_credential_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--access-key``, ``--secret-key`` and ``--client-config`` to one admin command."""
    parser.add_argument("--access-key", metavar="KEY",
                        help=f"sign requests with this access key (or ${ACCESS_KEY_ENV}); "
                             "needed for admin requests when the nodes set "
                             "[security] admin_access_key")
    parser.add_argument("--secret-key", metavar="SECRET",
                        help=f"the access key's secret (better: ${SECRET_KEY_ENV})")
    add_client_config_option(parser)


def sign_requests(rpc: RpcClient, args: argparse.Namespace,
                  environ: Mapping[str, str] = os.environ) -> None:
    """Have ``rpc`` sign every request with the credentials given, if any.

    Options win over the environment, the environment over the ``--client-config``
    file's ``[security]``; a key without its secret (or the other way round) is a
    ``ConfigError``.
    """
    access_key = getattr(args, "access_key", None) or environ.get(ACCESS_KEY_ENV, "")
    secret_key = getattr(args, "secret_key", None) or environ.get(SECRET_KEY_ENV, "")
    if not access_key and not secret_key:
        security = client_security(args, environ)
        access_key, secret_key = security.admin_access_key, security.admin_secret_key
    if bool(access_key) != bool(secret_key):
        missing = "--secret-key" if access_key else "--access-key"
        env = SECRET_KEY_ENV if access_key else ACCESS_KEY_ENV
        raise ConfigError(f"{missing} (or ${env}) is needed too: requests are signed with an "
                          "access key and its secret key")
    if access_key:
        rpc.sign = Signer(access_key, secret_key)
