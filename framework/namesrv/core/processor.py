"""The name server's request handling, sans-I/O: remoting requests in, responses out.

``NameServerCore.handle(request, connection, now)`` answers one request
against the route table (``RouteInfo``); the driver passes the connection
it came on (a broker's registration is tied to it, so a closed connection
removes the broker at once) and the time. ``scan(now)`` drops silent
brokers, ``take_notices()`` gives the NOTIFY_MIN_BROKER_ID_CHANGE messages
to send, ``take_vouches()`` the GET_BROKER_EPOCH_CACHE questions to masters
(their answers come back through ``vouched``). Nothing here reads a clock or a socket.

Requests served, with RocketMQ's codes and header keys:

- 103 REGISTER_BROKER: ``brokerName``, ``brokerAddr``, ``clusterName``,
  ``haServerAddr``, ``brokerId``, ``heartbeatTimeoutMillis``,
  ``enableActingMaster``, ``compressed``, ``bodyCrc32``; the body is a
  ``RegisterBrokerBody``. The answer carries ``masterAddr`` and
  ``haServerAddr`` for a slave.
- 104 UNREGISTER_BROKER: ``brokerName``, ``brokerAddr``, ``clusterName``, ``brokerId``.
- 105 GET_ROUTEINFO_BY_TOPIC: ``topic`` -> ``TopicRouteData``, or TOPIC_NOT_EXIST 17.
- 106 GET_BROKER_CLUSTER_INFO -> ``ClusterInfo``.
- 904 BROKER_HEARTBEAT: ``clusterName``, ``brokerAddr``, ``brokerName``.
- 322 QUERY_DATA_VERSION: ``clusterName``, ``brokerAddr`` and a ``DataVersion``
  body -> ``changed`` and the version held.
- 206 GET_ALL_TOPIC_LIST_FROM_NAMESERVER -> ``{"topicList": [...]}``.
- 216 DELETE_TOPIC_IN_NAMESRV: ``topic``, optional ``clusterName``.
- 901 GET_BROKER_MEMBER_GROUP: ``clusterName``, ``brokerName``.
- 224 GET_TOPICS_BY_CLUSTER: ``cluster`` -> ``{"topicList": [...]}``.
- 304 GET_SYSTEM_TOPIC_LIST_FROM_NS -> ``{"brokerAddr": ..., "topicList": [...]}``.
- 205 WIPE_WRITE_PERM_OF_BROKER and 327 ADD_WRITE_PERM_OF_BROKER: ``brokerName``
  -> ``wipeTopicCount`` / ``addTopicCount``, the topics the group holds.
- 100 PUT_KV_CONFIG (``namespace``, ``key``, ``value``), 101 GET_KV_CONFIG
  (``namespace``, ``key`` -> ``value``, or QUERY_NOT_FOUND 22), 102
  DELETE_KV_CONFIG (``namespace``, ``key``), 219 GET_KVLIST_BY_NAMESPACE
  (``namespace`` -> a ``KVTable`` body, or QUERY_NOT_FOUND): the KV config
  (``triomq.namesrv.core.kv_config``). With ``order_message_enable`` a route
  answer carries the topic's ``orderTopicConf`` from it, and a registration
  is answered with its ORDER_TOPIC_CONFIG namespace (as RocketMQ does while
  ``returnOrderTopicConfigToBroker`` is on).
- 319 GET_NAMESRV_CONFIG and 318 UPDATE_NAMESRV_CONFIG: the settings in
  force as properties (``triomq.namesrv.core.config_properties``); a body naming
  a black-listed key is NO_PERMISSION 16, an unknown or read-only one
  INVALID_PARAMETER 29.

The admin requests among these (KV put and delete, the write-permission
pair, the config update, topic deletion) are guarded by the node's RPC
server (``triomq.admin_access``) before they reach this core.

A request the table refuses, or whose header or body is malformed, gets a
response code with a remark naming the field (SYSTEM_ERROR for a missing
header field, as RocketMQ's header decoding answers); nothing is changed
and the connection stays open.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Callable, Hashable

import attrs

from triomq.controller.core.wire import WireError, decode_epoch_cache
from triomq.namesrv.config import NamesrvConfig
from triomq.namesrv.core.config_properties import (
    NamesrvFacts,
    UpdateRefused,
    namesrv_properties,
    updated,
)
from triomq.namesrv.core.kv_config import ORDER_TOPIC_CONFIG, KVConfig, encode_kv_table
from triomq.namesrv.core.route_info import (
    BrokerRegistration,
    MasterVouch,
    RouteInfo,
    RouteRefused,
)
from triomq.protocol.header_fields import HeaderFields
from triomq.protocol.java_properties import PropertiesError, dump_properties, load_properties
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.request_codes import RequestCode
from triomq.protocol.response_codes import ResponseCode
from triomq.protocol.route import (
    DataVersion,
    RouteDataError,
    decode_register_broker_body,
    dumps,
    loads,
)

__all__ = ["NameServerCore", "RequestCode", "ResponseCode"]




class NameServerCore:
    """Answers name-server requests from a ``RouteInfo`` and a ``KVConfig``.

    ``config`` is the settings in force (UPDATE_NAMESRV_CONFIG replaces it);
    ``facts`` what GET_NAMESRV_CONFIG shows of the running node besides.
    """

    def __init__(self, route: RouteInfo | None = None, *,
                 config: NamesrvConfig | None = None, kv: KVConfig | None = None,
                 facts: NamesrvFacts | None = None) -> None:
        self.config = config if config is not None else NamesrvConfig()
        self.route = route if route is not None else RouteInfo(
            default_broker_timeout_ms=self.config.broker_not_active_timeout)
        self._apply_route_settings()
        self.kv = kv if kv is not None else KVConfig()
        self.facts = facts if facts is not None else NamesrvFacts()
        self._handlers: dict[int, Callable[[RemotingCommand, Hashable, int],
                                           RemotingCommand]] = {
            RequestCode.REGISTER_BROKER: self._register,
            RequestCode.UNREGISTER_BROKER: self._unregister,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self._route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self._cluster_info,
            RequestCode.BROKER_HEARTBEAT: self._heartbeat,
            RequestCode.QUERY_DATA_VERSION: self._query_data_version,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self._topic_list,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self._delete_topic,
            RequestCode.GET_BROKER_MEMBER_GROUP: self._member_group,
            RequestCode.GET_TOPICS_BY_CLUSTER: self._topics_of_cluster,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: self._system_topics,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self._wipe_write_perm,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: self._add_write_perm,
            RequestCode.PUT_KV_CONFIG: self._put_kv,
            RequestCode.GET_KV_CONFIG: self._get_kv,
            RequestCode.DELETE_KV_CONFIG: self._delete_kv,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self._kv_list,
            RequestCode.GET_NAMESRV_CONFIG: self._get_config,
            RequestCode.UPDATE_NAMESRV_CONFIG: self._update_config,
        }

    def _apply_route_settings(self) -> None:
        self.route.support_acting_master = self.config.support_acting_master
        self.route.delete_topic_with_broker_registration = (
            self.config.delete_topic_with_broker_registration)
        self.route.default_broker_timeout_ms = self.config.broker_not_active_timeout

    @property
    def codes(self) -> frozenset[int]:
        return frozenset(self._handlers)

    def handle(self, request: RemotingCommand, connection: Hashable,
               now: int) -> RemotingCommand:
        """The answer to ``request``; a code this core does not serve raises ``KeyError``."""
        handler = self._handlers[request.code]
        try:
            return handler(request, connection, now)
        except (WireError, RouteDataError) as exc:
            return RemotingCommand.response(ResponseCode.SYSTEM_ERROR, remark=str(exc))
        except RouteRefused as exc:
            return RemotingCommand.response(exc.code, remark=exc.remark)

    def connection_closed(self, connection: Hashable) -> None:
        self.route.connection_closed(connection)

    def scan(self, now: int) -> None:
        self.route.expire(now)

    def take_vouches(self) -> list[tuple[MasterVouch, RemotingCommand]]:
        """GET_BROKER_EPOCH_CACHE requests to send (each to its vouch's address), which
        ask masters to vouch for their state versions; answer with ``vouched``."""
        return [(vouch, RemotingCommand.request(RequestCode.GET_BROKER_EPOCH_CACHE))
                for vouch in self.route.take_vouches()]

    def vouched(self, vouch: MasterVouch, response: RemotingCommand | None, now: int) -> None:
        """The broker's answer to a vouch's request, or None if none came."""
        answer = None
        if response is not None and response.code == ResponseCode.SUCCESS:
            # A body that is not a broker's epoch cache vouches for nothing.
            with contextlib.suppress(WireError):
                answer = decode_epoch_cache(response.body)
        self.route.vouched(vouch, answer, now)

    def take_notices(self) -> list[tuple[str, RemotingCommand]]:
        """NOTIFY_MIN_BROKER_ID_CHANGE requests (oneway) and the broker address for each."""
        out: list[tuple[str, RemotingCommand]] = []
        for notice in self.route.take_notices():
            fields = {"brokerName": notice.broker_name,
                      "minBrokerId": str(notice.min_broker_id),
                      "minBrokerAddr": notice.min_broker_address}
            if notice.offline_broker_address is not None:
                fields["offlineBrokerAddr"] = notice.offline_broker_address
            if notice.ha_broker_address is not None:
                fields["haBrokerAddr"] = notice.ha_broker_address
            command = RemotingCommand.request(RequestCode.NOTIFY_MIN_BROKER_ID_CHANGE,
                                              fields, oneway=True)
            out.extend((address, command) for address in notice.notify)
        return out

    # -- handlers ---------------------------------------------------------------

    def _register(self, request: RemotingCommand, connection: Hashable,
                  now: int) -> RemotingCommand:
        header = HeaderFields(request.ext_fields, "REGISTER_BROKER", error=WireError)
        crc = header.optional_integer("bodyCrc32") or 0
        if crc and crc != zlib.crc32(request.body) & 0x7FFFFFFF:
            return RemotingCommand.response(
                ResponseCode.SYSTEM_ERROR, remark="REGISTER_BROKER: bodyCrc32 does not match "
                                                  "the body (crc32 not match)")
        acting = request.ext_fields.get("enableActingMaster", "")
        body = decode_register_broker_body(request.body,
                                           compressed=header.boolean("compressed"))
        result = self.route.register(BrokerRegistration(
            header.string("clusterName"), header.string("brokerName"),
            header.integer("brokerId"), header.string("brokerAddr"),
            request.ext_fields.get("haServerAddr", ""), body,
            header.optional_integer("heartbeatTimeoutMillis"),
            None if acting == "" else header.boolean("enableActingMaster"),
            request.ext_fields.get("zoneName")), now, connection)
        fields = {}
        if result.master_address is not None:
            fields["masterAddr"] = result.master_address
        if result.ha_server_address is not None:
            fields["haServerAddr"] = result.ha_server_address
        order_confs = self.kv.namespace(ORDER_TOPIC_CONFIG)
        answer = b""
        if self.config.return_order_topic_config_to_broker and order_confs is not None:
            answer = encode_kv_table(order_confs)
        return RemotingCommand.response(ext_fields=fields, body=answer)

    def _unregister(self, request: RemotingCommand, connection: Hashable,
                    now: int) -> RemotingCommand:
        header = HeaderFields(request.ext_fields, "UNREGISTER_BROKER", error=WireError)
        self.route.unregister(header.string("clusterName"), header.string("brokerAddr"),
                              header.string("brokerName"), header.integer("brokerId"))
        return RemotingCommand.response()

    def _route(self, request: RemotingCommand, connection: Hashable,
               now: int) -> RemotingCommand:
        topic = HeaderFields(request.ext_fields, "GET_ROUTEINFO_BY_TOPIC",
                             error=WireError).string("topic")
        body = self.route.route_body(topic)
        if body is None:
            return RemotingCommand.response(
                ResponseCode.TOPIC_NOT_EXIST,
                remark=f"No topic route info in name server for the topic: {topic}")
        order_conf = (self.kv.get(ORDER_TOPIC_CONFIG, topic)
                      if self.config.order_message_enable else None)
        route = self.route.topic_route(topic) if order_conf is not None else None
        if route is not None:
            # Not cached: the KV config changes apart from the route table.
            body = attrs.evolve(route, order_topic_conf=order_conf).encode()
        return RemotingCommand.response(body=body)

    def _cluster_info(self, request: RemotingCommand, connection: Hashable,
                      now: int) -> RemotingCommand:
        return RemotingCommand.response(body=self.route.cluster_info().encode())

    def _heartbeat(self, request: RemotingCommand, connection: Hashable,
                   now: int) -> RemotingCommand:
        header = HeaderFields(request.ext_fields, "BROKER_HEARTBEAT", error=WireError)
        self.route.heartbeat(header.string("clusterName"), header.string("brokerAddr"), now)
        return RemotingCommand.response()

    def _query_data_version(self, request: RemotingCommand, connection: Hashable,
                            now: int) -> RemotingCommand:
        header = HeaderFields(request.ext_fields, "QUERY_DATA_VERSION", error=WireError)
        cluster, address = header.string("clusterName"), header.string("brokerAddr")
        asked = DataVersion.from_json(loads(request.body, "QUERY_DATA_VERSION body"),
                                      "QUERY_DATA_VERSION body")
        held = self.route.data_version(cluster, address)
        self.route.touch(cluster, address, now)
        changed = "true" if held is None or held != asked else "false"
        return RemotingCommand.response(
            ext_fields={"changed": changed},
            body=b"" if held is None else dumps(held.to_json()))

    def _topic_list(self, request: RemotingCommand, connection: Hashable,
                    now: int) -> RemotingCommand:
        if not self.config.enable_all_topic_list:
            return RemotingCommand.response(ResponseCode.SYSTEM_ERROR, remark="disable")
        return RemotingCommand.response(body=dumps({"topicList": self.route.topics()}))

    def _topics_of_cluster(self, request: RemotingCommand, connection: Hashable,
                           now: int) -> RemotingCommand:
        if not self.config.enable_topic_list:
            return RemotingCommand.response(ResponseCode.SYSTEM_ERROR, remark="disable")
        cluster = _present(request, "cluster", "GET_TOPICS_BY_CLUSTER")
        return RemotingCommand.response(
            body=dumps({"topicList": self.route.topics_of_cluster(cluster)}))

    def _system_topics(self, request: RemotingCommand, connection: Hashable,
                       now: int) -> RemotingCommand:
        names, address = self.route.system_topics()
        body: dict[str, object] = {"topicList": names}
        if address is not None:
            body["brokerAddr"] = address
        return RemotingCommand.response(body=dumps(body))

    def _wipe_write_perm(self, request: RemotingCommand, connection: Hashable,
                         now: int) -> RemotingCommand:
        name = _present(request, "brokerName", "WIPE_WRITE_PERM_OF_BROKER")
        count = self.route.set_write_permission(name, writable=False)
        return RemotingCommand.response(ext_fields={"wipeTopicCount": str(count)})

    def _add_write_perm(self, request: RemotingCommand, connection: Hashable,
                        now: int) -> RemotingCommand:
        name = _present(request, "brokerName", "ADD_WRITE_PERM_OF_BROKER")
        count = self.route.set_write_permission(name, writable=True)
        return RemotingCommand.response(ext_fields={"addTopicCount": str(count)})

    def _put_kv(self, request: RemotingCommand, connection: Hashable,
                now: int) -> RemotingCommand:
        namespace, key, value = (_present(request, name, "PUT_KV_CONFIG")
                                 for name in ("namespace", "key", "value"))
        self.kv.put(namespace, key, value)
        return RemotingCommand.response()

    def _get_kv(self, request: RemotingCommand, connection: Hashable,
                now: int) -> RemotingCommand:
        namespace, key = (_present(request, name, "GET_KV_CONFIG")
                          for name in ("namespace", "key"))
        value = self.kv.get(namespace, key)
        if value is None:
            return RemotingCommand.response(
                ResponseCode.QUERY_NOT_FOUND,
                remark=f"No config item, Namespace: {namespace} Key: {key}")
        return RemotingCommand.response(ext_fields={"value": value})

    def _delete_kv(self, request: RemotingCommand, connection: Hashable,
                   now: int) -> RemotingCommand:
        namespace, key = (_present(request, name, "DELETE_KV_CONFIG")
                          for name in ("namespace", "key"))
        self.kv.delete(namespace, key)
        return RemotingCommand.response()

    def _kv_list(self, request: RemotingCommand, connection: Hashable,
                 now: int) -> RemotingCommand:
        namespace = _present(request, "namespace", "GET_KVLIST_BY_NAMESPACE")
        table = self.kv.namespace(namespace)
        if table is None:
            return RemotingCommand.response(ResponseCode.QUERY_NOT_FOUND,
                                            remark=f"No config item, Namespace: {namespace}")
        return RemotingCommand.response(body=encode_kv_table(table))

    def _get_config(self, request: RemotingCommand, connection: Hashable,
                    now: int) -> RemotingCommand:
        return RemotingCommand.response(
            body=dump_properties(namesrv_properties(self.config, self.facts)))

    def _update_config(self, request: RemotingCommand, connection: Hashable,
                       now: int) -> RemotingCommand:
        try:
            self.config = updated(self.config, load_properties(request.body), self.facts)
        except PropertiesError as exc:
            return RemotingCommand.response(ResponseCode.SYSTEM_ERROR,
                                            remark=f"UPDATE_NAMESRV_CONFIG body: {exc}")
        except UpdateRefused as exc:
            code = (ResponseCode.NO_PERMISSION if exc.black_listed
                    else ResponseCode.INVALID_PARAMETER)
            return RemotingCommand.response(code, remark=exc.remark)
        self._apply_route_settings()
        return RemotingCommand.response()

    def _delete_topic(self, request: RemotingCommand, connection: Hashable,
                      now: int) -> RemotingCommand:
        header = HeaderFields(request.ext_fields, "DELETE_TOPIC_IN_NAMESRV", error=WireError)
        self.route.delete_topic(header.string("topic"),
                                request.ext_fields.get("clusterName") or None)
        return RemotingCommand.response()

    def _member_group(self, request: RemotingCommand, connection: Hashable,
                      now: int) -> RemotingCommand:
        header = HeaderFields(request.ext_fields, "GET_BROKER_MEMBER_GROUP", error=WireError)
        group = self.route.member_group(header.string("clusterName"),
                                        header.string("brokerName"))
        return RemotingCommand.response(body=group.encode())


def _present(request: RemotingCommand, key: str, where: str) -> str:
    """A header field RocketMQ marks ``@CFNotNull``: it must be there, and may be empty."""
    value = request.ext_fields.get(key)
    if value is None:
        raise WireError(f"{where}: header field {key!r}: missing")
    return value
