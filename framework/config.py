"""The node's configuration: attrs classes, built in code or loaded from TOML.

In code::

    config = NodeConfig(name="b1", role="broker", store=StoreConfig(path="/data/b1"),
                        broker=BrokerConfig(broker_name="broker-a"))

From a file::

    config = load_toml(NodeConfig, "broker.toml")

The kernel's own keys are declared here; every other table is a role's
section, contributed by the plugin that runs the role
(``triomq_config_sections``: the broker plugin's ``[broker]``, the
controller plugin's ``[controller]``), and the values of ``role`` are the
roles plugins declare (``triomq_roles``). ``load_toml(NodeConfig, ...)`` and
``from_mapping(NodeConfig, ...)`` know the sections of the plugins found by
entry point, less ``[plugins] disable``; ``NodeConfig.from_mapping(data,
plugins=pm)`` those of a given plugin manager (a host's own plugins).

Unknown keys and bad values are rejected with the key path and the reason
(``triomq.settings`` has the machinery). Every key is documented where it
is declared; ``triomq config`` lists them all with their defaults.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

import attrs

from triomq.admin_access import AdminAccess, check_certificate_name
from triomq.errors import ConfigError, PluginError
from triomq.node_auth import DEFAULT_WINDOW_MS, InnerAuth, NonceCache
from triomq.protocol.remoting import DEFAULT_MAX_EXT_FIELDS, DEFAULT_MAX_HEADER_SIZE
from triomq.rpc.server import DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_CONNECTIONS_PER_PEER
from triomq.settings import (
    build,
    describe,
    describe_fields,
    from_mapping,
    join_key,
    load_toml,
    one_of,
    positive,
    setting,
)

if TYPE_CHECKING:
    from triomq.plugin_manager import PluginManager

__all__ = ["STANDALONE", "NodeConfig", "PluginsConfig", "RemotingConfig", "SecurityConfig",
           "StoreConfig", "TransportConfig", "describe", "from_mapping", "load_toml"]

#: The one role the kernel knows: a node running only what plugins add for it.
STANDALONE = "standalone"


@attrs.frozen
class PluginsConfig:
    """``[plugins]``: which discovered plugins to leave out."""

    disable: tuple[str, ...] = setting(
        (), doc="Entry-point names of discovered plugins not to load, e.g. ['transport_tcp'].")


@attrs.frozen
class TransportConfig:
    """``[transport]``: options handed to every transport plugin, by scheme."""

    options: dict[str, dict[str, Any]] = setting(
        factory=dict,
        doc="Per-scheme options, e.g. [transport.options.tcp] connect_timeout = 2.0. "
            "Each transport plugin documents its own keys.")


@attrs.frozen
class StoreConfig:
    """``[store]``: where and how the node keeps its data."""

    scheme: str = setting(
        "mmap", doc="Store plugin to use: 'mmap' or 'lmdb' (or a third-party one).")
    path: str = setting("", doc="Store root directory (RocketMQ's storePathRootDir). "
                               "Empty: a node that keeps nothing on disk.")
    options: dict[str, Any] = setting(
        factory=dict, doc="Options for the store plugin (segment size, flush policy, ...); "
                          "the plugin documents its keys.")


@attrs.frozen
class RemotingConfig:
    """``[remoting]``: what the node's RPC server and client take from a peer.

    The connection caps bound what peers hold (one more connection is closed
    as soon as it is accepted); the header limits bound the work one frame
    costs, checked while it is decoded, before any handler runs.
    """

    max_connections: int = setting(
        DEFAULT_MAX_CONNECTIONS, doc="Connections the RPC server keeps open at once.",
        check=positive)
    max_connections_per_peer: int = setting(
        DEFAULT_MAX_CONNECTIONS_PER_PEER,
        doc="Connections the RPC server keeps open at once from one host (a peer's address "
            "less its port), so that one client cannot lock the others out.", check=positive)
    max_header_size: int = setting(
        DEFAULT_MAX_HEADER_SIZE,
        doc="Largest remoting header accepted, in bytes; a frame with a larger one closes "
            "its connection as soon as its length arrives.", check=positive)
    max_ext_fields: int = setting(
        DEFAULT_MAX_EXT_FIELDS,
        doc="Most extFields accepted in one header; a request with more is answered "
            "SYSTEM_ERROR before any handler runs.", check=positive)


def _certificate_names(names: tuple[str, ...]) -> str | None:
    for name in names:
        reason = check_certificate_name(name)
        if reason is not None:
            return f"{name!r}: {reason}"
    return None


#: Where a node looks for the cluster's secret when the config names neither it nor a file.
INNER_SECRET_ENV = "TRIOMQ_INNER_CLIENT_SECRET_KEY"


@attrs.frozen
class SecurityConfig:
    """``[security]``: who may send admin requests and how nodes know each other.

    Admin requests (``triomq.admin_access`` has the rule) are topic and
    subscription-group changes, broker, name-server and controller
    configuration, CLEAN_BROKER_DATA and an administrator's ELECT_MASTER.
    With no admin credential set they are open to every client. With one
    set, each needs one of them (else NO_PERMISSION); sends, pulls and
    routes stay open to all.

    With ``inner_client_access_key`` set, the nodes sign every request they
    send each other and every HA handshake with the cluster's shared secret,
    and refuse the cluster-internal ones not so signed
    (``triomq.node_auth``)::

        [security]
        admin_access_key = "ops"          # RocketMQ ACL: mqadmin's accessKey
        admin_secret_key = "s3cret"       # and its secretKey
        admin_certificates = ["CN=ops-admin"]   # mutual TLS client certificates
        inner_client_access_key = "cluster"
        inner_client_secret_file = "/etc/triomq/cluster.secret"
    """

    admin_access_key: str = setting(
        "", doc="Access key of the admin (RocketMQ ACL's accessKey): admin requests signed "
                "with it and admin_secret_key pass. Empty: no signing.")
    admin_secret_key: str = setting(
        "", doc="The admin's secret key (RocketMQ ACL's secretKey), the shared secret admin "
                "requests are signed with (HmacSHA1); set it with admin_access_key.", secret=True)
    admin_certificates: tuple[str, ...] = setting(
        (), doc="Client certificates (mutual TLS, [transport.options.tcp.tls] "
                "require_client_cert) whose admin requests pass: 'sha256:<fingerprint hex>' "
                "or 'CN=<subject common name>'.", check=_certificate_names)
    admin_accept_unbound_signature: bool = setting(
        True, doc="Whether an admin signature that binds no request code, time and nonce "
                  "passes, as RocketMQ's own mqadmin signs (AclClientRPCHook): such a request "
                  "can be replayed, or sent under another code, by whoever captured it. The "
                  "triomq CLI always binds them; false refuses the others.")
    inner_client_access_key: str = setting(
        "", doc="Access key of the cluster (RocketMQ's innerClientAuthenticationCredentials "
                "accessKey): set, every node signs the requests it sends other nodes and its "
                "HA handshakes with it and the cluster's secret, and refuses cluster-internal "
                "requests and HA handshakes not so signed. Empty: nodes do not authenticate "
                "each other.")
    inner_client_secret_key: str = setting(
        "", doc="The cluster's secret key, shared by every node (HmacSHA1). Better: "
                f"inner_client_secret_file, or ${INNER_SECRET_ENV} when neither is set.",
        secret=True)
    inner_client_secret_file: str = setting(
        "", doc="A file holding the cluster's secret key (its first line), read when the "
                "node starts; instead of inner_client_secret_key.")
    clock_skew_window_ms: int = setting(
        DEFAULT_WINDOW_MS,
        doc="How far from the receiver's clock a signed request's time may be, in ms (the "
            "nodes' own and admin signatures that bind a time): an older one is refused as "
            "stale, and nonces are remembered for twice this long to refuse replays. Keep "
            "the nodes' clocks synchronised (NTP).",
        check=positive)

    def __attrs_post_init__(self) -> None:
        # Said without the values: one of them is a secret.
        if bool(self.admin_access_key) != bool(self.admin_secret_key):
            raise ConfigError("admin_access_key and admin_secret_key are set together "
                              "(one of them is empty)", "admin_secret_key")
        if self.inner_client_secret_key and self.inner_client_secret_file:
            raise ConfigError("inner_client_secret_key and inner_client_secret_file name the "
                              "same secret: set one of them", "inner_client_secret_file")
        if not self.inner_client_access_key and (self.inner_client_secret_key
                                                 or self.inner_client_secret_file):
            raise ConfigError("the cluster's secret is set without inner_client_access_key",
                              "inner_client_access_key")

    def admin_access(self) -> AdminAccess:
        """The rule a node's RPC server applies to admin requests."""
        return AdminAccess(self.admin_access_key, self.admin_secret_key,
                           frozenset(self.admin_certificates),
                           accept_unbound=self.admin_accept_unbound_signature,
                           nonces=NonceCache(self.clock_skew_window_ms))

    def inner_auth(self, identity: str,
                   environ: Mapping[str, str] = os.environ) -> InnerAuth | None:
        """The node's cluster credential (``None`` without ``inner_client_access_key``).

        The secret is ``inner_client_secret_key``, else the first line of
        ``inner_client_secret_file``, else ``$TRIOMQ_INNER_CLIENT_SECRET_KEY``;
        none of them, an empty one or an unreadable file is a ``ConfigError``.
        """
        if not self.inner_client_access_key:
            return None
        secret = self.inner_client_secret_key
        if self.inner_client_secret_file:
            path = self.inner_client_secret_file
            try:
                with open(path, encoding="utf-8") as file:
                    secret = file.readline().rstrip("\r\n")
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(f"cannot read the cluster's secret from {path}: {exc}",
                                  "security.inner_client_secret_file") from None
            if not secret:
                raise ConfigError(f"{path}: its first line is empty",
                                  "security.inner_client_secret_file")
        if not secret:
            secret = environ.get(INNER_SECRET_ENV, "")
        if not secret:
            raise ConfigError("inner_client_access_key is set but no secret: set "
                              f"inner_client_secret_file, inner_client_secret_key or "
                              f"${INNER_SECRET_ENV}", "security.inner_client_secret_key")
        return InnerAuth(self.inner_client_access_key, secret, identity,
                         NonceCache(self.clock_skew_window_ms))


def _not_empty(value: str) -> str | None:
    return None if value else "must not be empty"


@attrs.frozen(init=False)
class NodeConfig:
    """One node: its identity, role, transport and store, and its roles' sections.

    A section is read as an attribute (``config.broker``) or with
    ``section(name)``; a section not given is its class's defaults. Sections
    are passed to the constructor by table name, like the node's own keys.
    """

    name: str = setting("node", doc="The node's name; also its default in-process address.",
                        check=_not_empty)
    role: str = setting(
        STANDALONE, doc="What the node runs: 'standalone' (only what plugins add) or a role "
                        "some plugin declares (`triomq plugins` lists them).",
        check=_not_empty)
    listen: str = setting("", doc="Address the node serves RPC on, e.g. 'tcp://127.0.0.1:9876' "
                                  "or 'inproc://n1'. Empty: no RPC server.")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = setting(
        "INFO", doc="Logging threshold of the node's logger.",
        check=one_of("DEBUG", "INFO", "WARNING", "ERROR"))
    plugins: PluginsConfig = setting(factory=PluginsConfig, doc="See [plugins].")
    transport: TransportConfig = setting(factory=TransportConfig, doc="See [transport].")
    store: StoreConfig = setting(factory=StoreConfig, doc="See [store].")
    security: SecurityConfig = setting(factory=SecurityConfig, doc="See [security].")
    remoting: RemotingConfig = setting(factory=RemotingConfig, doc="See [remoting].")
    #: The role sections given, by table name (the others are their defaults).
    sections: Mapping[str, Any] = attrs.field(factory=dict)

    def __init__(self, *, sections: Mapping[str, Any] | None = None, **keys: Any) -> None:
        own = {k: v for k, v in keys.items() if k in _OWN_KEYS}
        given = {**(sections or {}), **{k: v for k, v in keys.items() if k not in _OWN_KEYS}}
        for table, value in given.items():
            if not attrs.has(type(value)):
                raise ConfigError(
                    f"neither a key of the node ({', '.join(sorted(_OWN_KEYS))}) nor a "
                    f"section (an attrs object), got {value!r}", table)
        self.__attrs_init__(**own, sections=given)

    def __getattr__(self, name: str) -> Any:
        # Only reached for names that are not attributes: the role sections.
        if name.startswith("_") or name == "sections":
            raise AttributeError(name)
        return self.section(name)

    def section(self, table: str) -> Any:
        """The section ``[table]``: the one given, else its class's defaults.

        A node's config holds every section of the node's plugins
        (``open_node`` completes it, ``with_sections``); elsewhere a section
        not given is looked up among the plugins found by entry point.
        """
        if table in self.sections:
            return self.sections[table]
        known = _discovered(frozenset(self.plugins.disable))[0]
        if table not in known:
            raise AttributeError(
                f"NodeConfig has no section {table!r}; sections: "
                f"{', '.join(sorted({*self.sections, *known})) or 'none'}")
        return known[table]()

    def with_sections(self, plugins: PluginManager) -> NodeConfig:
        """This config with every section of ``plugins``: those given, checked, else defaults.

        A section no plugin contributes, or of another class than the one
        its plugin declares, is a ``ConfigError`` naming the table.
        """
        known = section_classes(plugins)
        for table, value in self.sections.items():
            if table not in known:
                raise ConfigError(f"no plugin contributes section {table!r}; "
                                  f"sections: {', '.join(known) or 'none'}", table)
            if not isinstance(value, known[table]):
                raise ConfigError(f"expected {known[table].__name__}, got {value!r}", table)
        complete = {table: self.sections[table] if table in self.sections else cls()
                    for table, cls in known.items()}
        return attrs.evolve(self, sections=complete)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, plugins: PluginManager | None = None,
                     path: str = "") -> NodeConfig:
        """Build a node's config from plain data (a parsed TOML file).

        The sections and roles are those of ``plugins``; by default, of the
        plugins found by entry point, less the data's ``[plugins] disable``.
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"expected a table, got {type(data).__name__}", path)
        if plugins is None:
            own_plugins = from_mapping(PluginsConfig, data.get("plugins", {}),
                                       join_key(path, "plugins"))
            known, roles = _discovered(frozenset(own_plugins.disable))
        else:
            known, roles = section_classes(plugins), tuple(plugins.roles())
        sections: dict[str, Any] = {
            table: from_mapping(known[table], value, join_key(path, table))
            for table, value in data.items() if table in known}
        config = build(cls, data, path, extra_keys=known, sections=sections)
        if config.role != STANDALONE and config.role not in roles:
            choices = ", ".join(map(repr, (STANDALONE, *roles)))
            raise ConfigError(f"expected one of {choices} (no plugin runs role "
                              f"{config.role!r}), got {config.role!r}", join_key(path, "role"))
        return config

    @classmethod
    def __from_mapping__(cls, data: Mapping[str, Any], path: str) -> NodeConfig:
        return cls.from_mapping(data, path=path)

    @classmethod
    def keys(cls, plugins: PluginManager | None = None,
             prefix: str = "") -> Iterator[tuple[str, str, str]]:
        """``(key path, default, doc)`` of every key: the node's, then each section's."""
        known = section_classes(plugins) if plugins is not None else _discovered(frozenset())[0]
        yield from describe_fields(cls, prefix, skip=("sections",))
        for table, section_cls in known.items():
            yield from describe(section_cls, join_key(prefix, table))

    @classmethod
    def __describe__(cls, prefix: str) -> Iterator[tuple[str, str, str]]:
        return cls.keys(prefix=prefix)


_OWN_KEYS = frozenset(f.name for f in attrs.fields(NodeConfig) if f.name != "sections")


def section_classes(plugins: PluginManager) -> dict[str, type]:
    """The sections ``plugins`` contribute, by table name; checked against the node's keys."""
    known = plugins.config_sections()
    for table, cls in known.items():
        if table in _OWN_KEYS or table == "sections":
            raise PluginError(f"a plugin's config section {table!r} has the name of a key "
                              f"of the node itself ({', '.join(sorted(_OWN_KEYS))})")
        if not attrs.has(cls):
            raise PluginError(f"config section {table!r}: {cls!r} is not an attrs class")
    return known


@functools.cache
def _discovered(disable: frozenset[str]) -> tuple[Mapping[str, type], tuple[str, ...]]:
    # The plugins an entry point names do not change while the process runs;
    # what is kept is read-only, being shared.
    from triomq.plugin_manager import PluginManager

    plugins = PluginManager.discover(disable)
    return MappingProxyType(section_classes(plugins)), tuple(plugins.roles())
