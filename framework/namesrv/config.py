"""``[namesrv]``: a name server's route keeping.

Keys keep RocketMQ's names in snake_case (``NamesrvConfig``); times are in
milliseconds::

    [namesrv]
    scan_not_active_broker_interval = 1000
    broker_not_active_timeout = 10000
    support_acting_master = false
    order_message_enable = false

The name server's KV config (PUT_KV_CONFIG and friends, ordered topics'
``orderTopicConf``) is kept in ``kvConfig.json`` under the node's
``[store] path``, as RocketMQ keeps it under ``kvConfigPath``; a name server
without a store path keeps it in memory only, and loses it when it stops.
GET_NAMESRV_CONFIG and UPDATE_NAMESRV_CONFIG show and change these keys
under RocketMQ's names (``triomq.namesrv.core.config_properties``).
"""

from __future__ import annotations

import attrs

from triomq.settings import positive, setting

__all__ = ["NamesrvConfig"]


@attrs.frozen
class NamesrvConfig:
    """The route table's liveness rules and features."""

    scan_not_active_broker_interval: int = setting(
        1000, doc="ms between scans for brokers silent longer than their timeout (RocketMQ: "
                  "5000). A broker whose connection closes leaves at once.", check=positive)
    broker_not_active_timeout: int = setting(
        10000, doc="ms without a registration or heartbeat after which a broker leaves the "
                   "routes, unless it registers with its own heartbeatTimeoutMillis (RocketMQ: "
                   "120000 for brokers that send none).", check=positive)
    support_acting_master: bool = setting(
        False, doc="Route a group without a master through its smallest alive slave, shown "
                   "as broker id 0 with read-only queues (RocketMQ's supportActingMaster).")
    delete_topic_with_broker_registration: bool = setting(
        False, doc="A registration that no longer lists a topic removes the group's queues "
                   "of it (RocketMQ's deleteTopicWithBrokerRegistration).")
    enable_all_topic_list: bool = setting(
        True, doc="Serve GET_ALL_TOPIC_LIST_FROM_NAMESERVER (RocketMQ's enableAllTopicList).")
    enable_topic_list: bool = setting(
        True, doc="Serve GET_TOPICS_BY_CLUSTER (RocketMQ's enableTopicList).")
    order_message_enable: bool = setting(
        False, doc="Route answers carry the topic's orderTopicConf from the KV config "
                   "namespace ORDER_TOPIC_CONFIG (RocketMQ's orderMessageEnable). The KV "
                   "config is kept in kvConfig.json under [store] path; in memory only "
                   "without one.")
    return_order_topic_config_to_broker: bool = setting(
        True, doc="A broker's registration is answered with the ORDER_TOPIC_CONFIG "
                  "namespace as a KVTable body (RocketMQ's returnOrderTopicConfigToBroker).")
