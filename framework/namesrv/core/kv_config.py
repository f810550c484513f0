"""The name server's KV config table, pure: RocketMQ's ``KVConfigManager``.

Values are strings kept by namespace and key. Admin tools put and delete
them (PUT_KV_CONFIG, DELETE_KV_CONFIG) and anyone reads them
(GET_KV_CONFIG, GET_KVLIST_BY_NAMESPACE). The one namespace RocketMQ itself
reads is ``ORDER_TOPIC_CONFIG``: per topic, the broker groups and queue
counts of an ordered topic (``broker-a:4;broker-b:4``), which
``mqadmin updateTopic -o true`` and ``updateOrderConf`` write and a route
answer carries as ``orderTopicConf``.

The table is saved whole as RocketMQ's ``kvConfig.json``
(``{"configTable": {namespace: {key: value}}}``); ``encode`` and ``decode``
convert, the name-server driver writes the file. As in RocketMQ, deleting
the last key of a namespace keeps the namespace, listed as empty. Every
change moves ``version``, so the driver knows when to save.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from triomq.errors import TriomqError

__all__ = ["ORDER_TOPIC_CONFIG", "KVConfig", "KVConfigError", "encode_kv_table"]

#: RocketMQ's ``NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG``.
ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


class KVConfigError(TriomqError, ValueError):
    """A saved table that is not ``kvConfig.json``'s shape."""


def _dumps(value: object) -> bytes:
    # fastjson's order for map keys is the hash map's; sorted keys keep the
    # file and the answers stable, which RocketMQ's readers do not mind.
    return json.dumps(value, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False).encode()


def encode_kv_table(table: Mapping[str, str]) -> bytes:
    """RocketMQ's ``KVTable`` body: ``{"table": {key: value}}``."""
    return _dumps({"table": dict(table)})


class KVConfig:
    """Namespaces of key -> value; every method runs to completion."""

    def __init__(self, table: Mapping[str, Mapping[str, str]] | None = None) -> None:
        self._table: dict[str, dict[str, str]] = {
            namespace: dict(values) for namespace, values in (table or {}).items()}
        self.version = 0

    def put(self, namespace: str, key: str, value: str) -> None:
        self._table.setdefault(namespace, {})[key] = value
        self.version += 1

    def get(self, namespace: str, key: str) -> str | None:
        return self._table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> bool:
        """Remove ``key``; whether it was there."""
        values = self._table.get(namespace)
        if values is None or key not in values:
            return False
        del values[key]
        self.version += 1
        return True

    def namespace(self, namespace: str) -> dict[str, str] | None:
        """The namespace's keys and values; None if nothing was ever put in it."""
        values = self._table.get(namespace)
        return None if values is None else dict(values)

    def encode(self) -> bytes:
        """The table as ``kvConfig.json``."""
        return _dumps({"configTable": self._table})

    @classmethod
    def decode(cls, data: bytes) -> KVConfig:
        """A table from ``kvConfig.json``; ``KVConfigError`` says what is wrong."""
        try:
            document = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise KVConfigError(f"not JSON: {exc}") from None
        table = document.get("configTable", {}) if isinstance(document, dict) else None
        if not isinstance(table, dict):
            raise KVConfigError("expected an object with a 'configTable' object")
        for namespace, values in table.items():
            if not isinstance(values, dict) or not all(
                    isinstance(v, str) for v in values.values()):
                raise KVConfigError(
                    f"configTable.{namespace}: expected an object of string values")
        return cls(table)
