"""The broker's topics at run time: ``config/topics.json``, the topic requests, a slave's copy.

``TopicService`` holds the broker's ``TopicTable`` (the rules live there),
loads it from ``<store root>/config/topics.json`` (RocketMQ's file; a new
store starts with the broker's own topics and, with
``auto_create_topic_enable``, TBW102), writes it back after every change
(a temporary file renamed into place, the previous version kept as
``topics.json.bak`` as RocketMQ's ``ConfigManager`` does) and serves:

- UPDATE_AND_CREATE_TOPIC 17: ``topic``, ``readQueueNums``,
  ``writeQueueNums``, ``perm``, ``topicFilterType``, ``topicSysFlag``, ``order``;
- DELETE_TOPIC_IN_BROKER 215: ``topic``;
- GET_ALL_TOPIC_CONFIG 21: the table as ``topics.json``;
- GET_TOPIC_CONFIG 351: ``topic`` (and ``lo``, asking for the static-topic
  mapping, which triomq never has): the one topic's config as fastjson
  writes RocketMQ's ``TopicConfigAndQueueMapping`` (its null
  ``mappingDetail`` left out), or TOPIC_NOT_EXIST, ``No topic in this
  broker. topic: T``, as RocketMQ answers. ``mqadmin topicStatus`` and
  ``consumerProgress`` ask it of each broker of a route.

A change tells ``on_change`` (the name-server registration registers at
once). Every ``slave_synchronize_period`` a slave copies its master's
table (GET_ALL_TOPIC_CONFIG), so a slave elected master knows its topics;
a copy puts back the master's whole table, whatever the slave changed.
A slave takes UPDATE_AND_CREATE_TOPIC and DELETE_TOPIC_IN_BROKER, as
RocketMQ's broker takes them on any replica: RocketMQ 5's
``DefaultMQAdminExt.deleteTopic`` sends the delete to every replica of the
cluster, and fails when one refuses (``mqadmin deleteSubGroup -c`` deletes
a group's retry and dead-letter topics so). A slave's change lasts until
its next copy: a topic created on the slave alone is gone again, one
deleted stays deleted once its master's table (deleted there too) is
copied, and a master that still holds it brings it back.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from triomq.broker.components import ComponentView
from triomq.broker.config import BrokerConfig
from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.broker.metadata import config_files
from triomq.broker.metadata.core.topic_table import TopicRefused, TopicTable
from triomq.clock import now_ms
from triomq.protocol.header_fields import HeaderFieldError, HeaderFields
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.route import PERM_READ, PERM_WRITE, TopicConfig, dumps
from triomq.rpc import RpcClient, RpcConnection, RpcServer

__all__ = ["TOPICS_FILE", "TopicService"]

log = logging.getLogger("triomq.broker")

TOPICS_FILE = os.path.join("config", "topics.json")

def load_topics(root: str, config: BrokerConfig, now_ms: int) -> TopicTable:
    """The table in ``<root>/config/topics.json`` (or its ``.bak``), else a new broker's."""
    table = config_files.load(root, TOPICS_FILE, TopicTable.decode)
    if table is not None:
        return table
    return TopicTable.with_system_topics(
        config.cluster_name, config.broker_name, auto_create=config.auto_create_topic_enable,
        now=now_ms)


def save_topics(root: str, table_json: bytes) -> None:
    config_files.save(root, TOPICS_FILE, table_json)


class TopicService:
    """The broker's topic table, its file and its requests."""

    def __init__(self, root: str, config: BrokerConfig, table: TopicTable, *,
                 broker: ComponentView) -> None:
        self.root = root
        self.config = config
        self.table = table
        self.broker = broker
        #: Called after every change (the name-server registration registers at once).
        self.on_change: Callable[[], None] = lambda: None
        self._dirty = config_files.Changes()
        self._saved = self.table.encode()

    def register(self, server: RpcServer) -> None:
        server.register(RequestCode.UPDATE_AND_CREATE_TOPIC, self.update_and_create_topic,
                        inline=True)
        server.register(RequestCode.DELETE_TOPIC_IN_BROKER, self.delete_topic, inline=True)
        server.register(RequestCode.GET_ALL_TOPIC_CONFIG, self.get_all_topic_config, inline=True)
        server.register(RequestCode.GET_TOPIC_CONFIG, self.get_topic_config, inline=True)

    def changed(self) -> None:
        """The table changed: save it and tell ``on_change``."""
        self._dirty.set()
        self.on_change()

    async def persist_loop(self) -> None:
        """Write the table whenever it changed (in a thread: it fsyncs); on the way out,
        write what changed last."""
        await self._dirty.write_each(self.save)

    def save(self) -> None:
        """Write the table if it differs from what was last written (blocking)."""
        data = self.table.encode()
        if data != self._saved:
            save_topics(self.root, data)
            self._saved = data

    def _change(self, what: str, request: RemotingCommand,
                apply: Callable[[HeaderFields], bool]) -> RemotingCommand:
        """Run a topic change: a bad header is INVALID_PARAMETER, a refused change its
        code; a change is saved and registered."""
        try:
            if apply(HeaderFields(request.ext_fields, what)):
                self.changed()
        except HeaderFieldError as exc:
            return RemotingCommand.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))
        except TopicRefused as exc:
            return RemotingCommand.response(exc.code, remark=exc.remark)
        return RemotingCommand.response()

    async def update_and_create_topic(self, request: RemotingCommand, peer: RpcConnection
                                      ) -> RemotingCommand:
        default = self.config.default_topic_queue_nums

        def update(header: HeaderFields) -> bool:
            perm = header.optional_integer("perm")
            return self.table.update(TopicConfig(
                header.string("topic"),
                header.optional_integer("readQueueNums") or default,
                header.optional_integer("writeQueueNums") or default,
                PERM_READ | PERM_WRITE if perm is None else perm,
                request.ext_fields.get("topicFilterType") or "SINGLE_TAG",
                header.optional_integer("topicSysFlag") or 0, header.boolean("order")),
                now_ms())

        return self._change("UPDATE_AND_CREATE_TOPIC", request, update)

    async def delete_topic(self, request: RemotingCommand, peer: RpcConnection
                           ) -> RemotingCommand:
        return self._change("DELETE_TOPIC_IN_BROKER", request,
                            lambda header: self.table.delete(header.string("topic"), now_ms()))

    async def get_all_topic_config(self, request: RemotingCommand, peer: RpcConnection
                                   ) -> RemotingCommand:
        return RemotingCommand.response(body=self.table.encode())

    async def get_topic_config(self, request: RemotingCommand, peer: RpcConnection
                               ) -> RemotingCommand:
        try:
            header = HeaderFields(request.ext_fields, "GET_TOPIC_CONFIG")
            topic = header.string("topic")
            header.boolean("lo")  # only checked: no topic here has a static mapping
        except HeaderFieldError as exc:
            return RemotingCommand.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))
        config = self.table.get(topic)
        if config is None:
            return RemotingCommand.response(
                ResponseCode.TOPIC_NOT_EXIST,
                remark=f"No topic in this broker. topic: {topic[:200]}")
        # TopicConfigAndQueueMapping: the TopicConfig's fields; fastjson leaves out the
        # null mappingDetail.
        return RemotingCommand.response(body=dumps(config.to_json()))

    async def copy_from_master(self, rpc: RpcClient) -> None:
        """A slave-term task: take the master's table every ``slave_synchronize_period``."""

        def adopt(master: TopicTable) -> None:
            if self.table.adopt(master.configs(), master.data_version):
                self.changed()

        await config_files.copy_from_master(
            what="topic configs", code=RequestCode.GET_ALL_TOPIC_CONFIG, decode=TopicTable.decode,
            adopt=adopt, rpc=rpc, broker=self.broker,
            period_ms=self.config.slave_synchronize_period)

