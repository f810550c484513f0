"""How a ``triomq`` client command connects: a node's own settings for TLS and credentials.

Every client command (``produce``, ``consume``, ``admin ...``) takes
``--client-config FILE``, or ``$TRIOMQ_CLIENT_CONFIG``: a node
configuration file, in the nodes' own format, so that a node's file works
as it is. The command takes from it what a client needs:

- ``[transport]``: the TLS certificate, key and authorities of
  ``[transport.options.tcp.tls]`` (a cluster with ``require_client_cert``
  takes the command's connections as it takes a node's), timeouts;
- ``[remoting]``: the limits on what peers send back;
- ``[security] admin_access_key`` / ``admin_secret_key``: the credentials
  admin requests are signed with, unless ``--access-key`` or
  ``$TRIOMQ_ACCESS_KEY`` give others (``triomq.cli_credentials``).

The rest of the file (its role, listen address, store, role sections) is
checked as a node's would be, then left alone: the command serves nothing
and stores nothing.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping

from triomq.config import NodeConfig, SecurityConfig
from triomq.errors import ConfigError
from triomq.settings import read_toml

__all__ = ["CLIENT_CONFIG_ENV", "add_client_config_option", "client_config",
           "client_security"]

CLIENT_CONFIG_ENV = "TRIOMQ_CLIENT_CONFIG"


def add_client_config_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--client-config`` to one client command."""
    parser.add_argument(
        "--client-config", metavar="FILE",
        help=f"a node's configuration file (or ${CLIENT_CONFIG_ENV}) whose [transport] TLS "
             "settings and [security] admin credentials the command connects with")


def _file_config(args: argparse.Namespace, environ: Mapping[str, str]) -> NodeConfig | None:
    path = getattr(args, "client_config", None) or environ.get(CLIENT_CONFIG_ENV, "")
    if not path:
        return None
    try:
        return NodeConfig.from_mapping(read_toml(path))
    except ConfigError as exc:
        raise ConfigError(str(exc), f"--client-config {path}") from None


def client_config(args: argparse.Namespace, name: str, *, log_level: str = "WARNING",
                  environ: Mapping[str, str] = os.environ) -> NodeConfig:
    """The command's own node: named ``name``, serving nothing, connecting as the
    ``--client-config`` file says (a ``ConfigError`` naming the key if it is wrong)."""
    file = _file_config(args, environ)
    if file is None:
        return NodeConfig(name=name, log_level=log_level)
    return NodeConfig(name=name, log_level=log_level, transport=file.transport,
                      remoting=file.remoting)


def client_security(args: argparse.Namespace,
                    environ: Mapping[str, str] = os.environ) -> SecurityConfig:
    """The ``[security]`` section of the ``--client-config`` file (defaults without one)."""
    file = _file_config(args, environ)
    return file.security if file is not None else SecurityConfig()
