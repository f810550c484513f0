"""The name server's request handling, sans-I/O: remoting requests in, responses out.

``NameServerCore.handle(request, connection, now)`` answers one request
against the route table (``RouteInfo``); the driver passes the connection
it came on (a broker's registration is tied to it, so a closed connection
removes the broker at once) and the time. ``scan(now)`` drops silent
brokers, ``take_notices()`` gives the NOTIFY_MIN_BROKER_ID_CHANGE messages
to send. Nothing here reads a clock or a socket.

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

A request the table refuses, or whose header or body is malformed, gets a
response code with a remark naming the field; nothing is changed and the
connection stays open.
"""

from __future__ import annotations

import enum
import zlib
from collections.abc import Callable, Hashable

from triomq.controller.wire import Header, WireError
from triomq.namesrv.route_info import BrokerRegistration, RouteInfo, RouteRefused
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.route import (
    DataVersion,
    RouteDataError,
    decode_register_broker_body,
    dumps,
    loads,
)

__all__ = ["NameServerCode", "NameServerCore", "ResponseCode"]


class NameServerCode(enum.IntEnum):
    """Requests a name server serves, and the one it sends (RocketMQ's numbers)."""

    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_TOPIC_IN_NAMESRV = 216
    QUERY_DATA_VERSION = 322
    GET_BROKER_MEMBER_GROUP = 901
    BROKER_HEARTBEAT = 904
    NOTIFY_MIN_BROKER_ID_CHANGE = 905


class ResponseCode(enum.IntEnum):
    SUCCESS = 0
    SYSTEM_ERROR = 1
    TOPIC_NOT_EXIST = 17


class NameServerCore:
    """Answers name-server requests from a ``RouteInfo``."""

    def __init__(self, route: RouteInfo | None = None) -> None:
        self.route = route if route is not None else RouteInfo()
        self._handlers: dict[int, Callable[[RemotingCommand, Hashable, int],
                                           RemotingCommand]] = {
            NameServerCode.REGISTER_BROKER: self._register,
            NameServerCode.UNREGISTER_BROKER: self._unregister,
            NameServerCode.GET_ROUTEINFO_BY_TOPIC: self._route,
            NameServerCode.GET_BROKER_CLUSTER_INFO: self._cluster_info,
            NameServerCode.BROKER_HEARTBEAT: self._heartbeat,
            NameServerCode.QUERY_DATA_VERSION: self._query_data_version,
            NameServerCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self._topic_list,
            NameServerCode.DELETE_TOPIC_IN_NAMESRV: self._delete_topic,
            NameServerCode.GET_BROKER_MEMBER_GROUP: self._member_group,
        }

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

    def take_notices(self) -> list[tuple[str, RemotingCommand]]:
        """NOTIFY_MIN_BROKER_ID_CHANGE requests (oneway) and the broker address for each."""
        out = []
        for notice in self.route.take_notices():
            fields = {"minBrokerId": str(notice.min_broker_id),
                      "minBrokerAddr": notice.min_broker_address}
            if notice.offline_broker_address is not None:
                fields["offlineBrokerAddr"] = notice.offline_broker_address
            if notice.ha_broker_address is not None:
                fields["haBrokerAddr"] = notice.ha_broker_address
            command = RemotingCommand.request(NameServerCode.NOTIFY_MIN_BROKER_ID_CHANGE,
                                              fields, oneway=True)
            out.extend((address, command) for address in notice.notify)
        return out

    # -- handlers ---------------------------------------------------------------

    def _register(self, request: RemotingCommand, connection: Hashable,
                  now: int) -> RemotingCommand:
        header = Header(request.ext_fields, "REGISTER_BROKER")
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
        return RemotingCommand.response(ext_fields=fields)

    def _unregister(self, request: RemotingCommand, connection: Hashable,
                    now: int) -> RemotingCommand:
        header = Header(request.ext_fields, "UNREGISTER_BROKER")
        self.route.unregister(header.string("clusterName"), header.string("brokerAddr"),
                              header.string("brokerName"), header.integer("brokerId"))
        return RemotingCommand.response()

    def _route(self, request: RemotingCommand, connection: Hashable,
               now: int) -> RemotingCommand:
        topic = Header(request.ext_fields, "GET_ROUTEINFO_BY_TOPIC").string("topic")
        body = self.route.route_body(topic)
        if body is None:
            return RemotingCommand.response(
                ResponseCode.TOPIC_NOT_EXIST,
                remark=f"No topic route info in name server for the topic: {topic}")
        return RemotingCommand.response(body=body)

    def _cluster_info(self, request: RemotingCommand, connection: Hashable,
                      now: int) -> RemotingCommand:
        return RemotingCommand.response(body=self.route.cluster_info().encode())

    def _heartbeat(self, request: RemotingCommand, connection: Hashable,
                   now: int) -> RemotingCommand:
        header = Header(request.ext_fields, "BROKER_HEARTBEAT")
        self.route.heartbeat(header.string("clusterName"), header.string("brokerAddr"), now)
        return RemotingCommand.response()

    def _query_data_version(self, request: RemotingCommand, connection: Hashable,
                            now: int) -> RemotingCommand:
        header = Header(request.ext_fields, "QUERY_DATA_VERSION")
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
        return RemotingCommand.response(body=dumps({"topicList": self.route.topics()}))

    def _delete_topic(self, request: RemotingCommand, connection: Hashable,
                      now: int) -> RemotingCommand:
        header = Header(request.ext_fields, "DELETE_TOPIC_IN_NAMESRV")
        self.route.delete_topic(header.string("topic"),
                                request.ext_fields.get("clusterName") or None)
        return RemotingCommand.response()

    def _member_group(self, request: RemotingCommand, connection: Hashable,
                      now: int) -> RemotingCommand:
        header = Header(request.ext_fields, "GET_BROKER_MEMBER_GROUP")
        group = self.route.member_group(header.string("clusterName"),
                                        header.string("brokerName"))
        return RemotingCommand.response(body=group.encode())
