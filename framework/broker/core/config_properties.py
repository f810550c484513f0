"""GET_BROKER_CONFIG's body: a broker's settings under RocketMQ's names. Pure.

RocketMQ answers GET_BROKER_CONFIG (26) with its configuration objects'
fields as a properties text, one ``name=value`` line each, sorted by name
(``Configuration.getAllConfigsFormatString``), and the configuration's
DataVersion as the JSON of the response header's ``version``; ``mqadmin
getBrokerConfig`` prints the lines.

``broker_properties`` gives each ``[broker]`` key that has a RocketMQ
counterpart under that name (``ROCKETMQ_NAMES``: ``ha_listen_port`` is
``haListenPort``, ``cluster_name`` ``brokerClusterName``), with RocketMQ's
value forms: booleans ``true``/``false``, address lists joined by ``;``
with no ``tcp://``. Keys RocketMQ has no name for (``TRIOMQ_ONLY``: HA
transport limits, static mode's ``master_epoch``) are left out, as are
RocketMQ settings triomq has no equivalent of. What the running broker
decides rather than its file (``Facts``) comes in as it is now: the broker
id (0 on a master, as RocketMQ's controller mode sets it), the role
(``SYNC_MASTER`` or ``SLAVE``), the listen port and address, the store
root and the HA port; ``flush_policy`` becomes ``flushDiskType``: a put
waits for its fsync (``SYNC_FLUSH``) unless the policy is ``none``.
``triomq.protocol.java_properties.dump_properties`` writes the text.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

__all__ = ["ROCKETMQ_NAMES", "TRIOMQ_ONLY", "Facts", "broker_properties"]

#: ``[broker]`` keys and RocketMQ's names for them.
ROCKETMQ_NAMES: Mapping[str, str] = {
    "broker_name": "brokerName",
    "cluster_name": "brokerClusterName",
    "ha_master_address": "haMasterAddress",
    "ha_transfer_batch_size": "haTransferBatchSize",
    "ha_send_heartbeat_interval": "haSendHeartbeatInterval",
    "ha_max_time_slave_not_catchup": "haMaxTimeSlaveNotCatchup",
    "check_sync_state_set_period": "checkSyncStateSetPeriod",
    "all_ack_in_sync_state_set": "allAckInSyncStateSet",
    "min_in_sync_replicas": "minInSyncReplicas",
    "sync_flush_timeout": "syncFlushTimeout",
    "flush_interval": "flushIntervalCommitLog",
    "is_sync_from_last_file": "syncFromLastFile",
    "is_async_learner": "asyncLearner",
    "enable_controller_mode": "enableControllerMode",
    "controller_addresses": "controllerAddr",
    "broker_heartbeat_interval": "brokerHeartbeatInterval",
    "controller_heartbeat_timeout": "controllerHeartBeatTimeoutMills",
    "sync_controller_metadata_period": "syncControllerMetadataPeriod",
    "election_priority": "brokerElectionPriority",
    "namesrv_addr": "namesrvAddr",
    "register_name_server_period": "registerNameServerPeriod",
    "broker_not_active_timeout": "brokerNotActiveTimeoutMillis",
    "enable_slave_acting_master": "enableSlaveActingMaster",
    "sync_broker_member_group_period": "syncBrokerMemberGroupPeriod",
    "send_heartbeat_timeout": "sendHeartbeatTimeoutMillis",
    "enable_remote_escape": "enableRemoteEscape",
    "compatible_with_old_name_srv": "compatibleWithOldNameSrv",
    "lock_in_strict_mode": "lockInStrictMode",
    "skip_pre_online": "skipPreOnline",
    "total_replicas": "totalReplicas",
    "auto_create_topic_enable": "autoCreateTopicEnable",
    "default_topic_queue_nums": "defaultTopicQueueNums",
    "max_message_size": "maxMessageSize",
    "auto_create_subscription_group": "autoCreateSubscriptionGroup",
    "notify_consumer_ids_changed_enable": "notifyConsumerIdsChangedEnable",
    "channel_expired_timeout": "channelExpiredTimeout",
    "message_index_enable": "messageIndexEnable",
    "max_hash_slot_num": "maxHashSlotNum",
    "max_index_num": "maxIndexNum",
    "default_query_max_num": "defaultQueryMaxNum",
    "max_msgs_num_batch": "maxMsgsNumBatch",
    "slave_read_enable": "slaveReadEnable",
    "lite_pull_message_enable": "litePullMessageEnable",
    "long_polling_enable": "longPollingEnable",
    "short_polling_time_mills": "shortPollingTimeMills",
    "offset_check_in_slave": "offsetCheckInSlave",
    "access_message_in_memory_max_ratio": "accessMessageInMemoryMaxRatio",
    "max_transfer_bytes_on_message_in_memory": "maxTransferBytesOnMessageInMemory",
    "max_transfer_count_on_message_in_memory": "maxTransferCountOnMessageInMemory",
    "max_transfer_bytes_on_message_in_disk": "maxTransferBytesOnMessageInDisk",
    "max_transfer_count_on_message_in_disk": "maxTransferCountOnMessageInDisk",
    "max_filter_message_size": "maxFilterMessageSize",
    "flush_consumer_offset_interval": "flushConsumerOffsetInterval",
    "consumer_offset_update_version_step": "consumerOffsetUpdateVersionStep",
    "reject_transaction_message": "rejectTransactionMessage",
    "transaction_time_out": "transactionTimeOut",
    "transaction_check_max": "transactionCheckMax",
    "transaction_check_interval": "transactionCheckInterval",
    "message_delay_level": "messageDelayLevel",
    "flush_delay_offset_interval": "flushDelayOffsetInterval",
    "delay_offset_update_version_step": "delayOffsetUpdateVersionStep",
    "timer_wheel_enable": "timerWheelEnable",
    "timer_max_delay_sec": "timerMaxDelaySec",
    "timer_precision_ms": "timerPrecisionMs",
    "timer_flush_interval_ms": "timerFlushIntervalMs",
    "revive_queue_num": "reviveQueueNum",
    "revive_interval": "reviveInterval",
    "pop_from_retry_probability": "popFromRetryProbability",
}

#: ``[broker]`` keys without a RocketMQ name, or given from ``Facts`` instead.
TRIOMQ_ONLY = frozenset({
    "broker_id", "store_path_root_dir", "ha_listen_port", "ha_listen_address",
    "master_epoch", "flush_policy", "ha_max_body_size", "ha_reconnect_min",
    "ha_reconnect_max", "ha_handshake_timeout", "ha_write_timeout", "ha_max_connections",
    "ha_receive_buffer_size", "slave_synchronize_period", "rebalance_lock_max_live_time",
    "auto_create_topic_limit", "auto_create_subscription_group_limit",
    "acting_escape_bridges", "schedule_max_in_flight", "pre_online_wait", "vip_channel",
})


@attrs.frozen
class Facts:
    """What the running broker decided: its id, role, addresses and store root."""

    broker_id: int
    is_master: bool
    listen_host: str
    listen_port: int
    ha_port: int
    store_root: str


def _address(address: str) -> str:
    """An address as RocketMQ's settings write it: ``host:port`` for TCP."""
    return address.removeprefix("tcp://")


def _value(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple | list):
        return ";".join(_address(a) for a in value)
    if isinstance(value, str):
        return _address(value)
    return str(value)


def broker_properties(settings: Mapping[str, object], facts: Facts) -> dict[str, str]:
    """The ``[broker]`` settings (``attrs.asdict`` of a ``BrokerConfig``) under RocketMQ's
    names (see the module)."""
    properties = {name: _value(settings[key]) for key, name in ROCKETMQ_NAMES.items()}
    properties.update({
        "brokerId": str(0 if facts.is_master else facts.broker_id),
        "brokerRole": "SYNC_MASTER" if facts.is_master else "SLAVE",
        "brokerIP1": facts.listen_host,
        "listenPort": str(facts.listen_port),
        "haListenPort": str(facts.ha_port),
        "storePathRootDir": facts.store_root,
        "storePathCommitLog": f"{facts.store_root}/commitlog",
        "storePathEpochFile": f"{facts.store_root}/epochFileCheckpoint",
        "storePathBrokerIdentity": f"{facts.store_root}/brokerIdentity",
        "flushDiskType": "ASYNC_FLUSH" if settings["flush_policy"] == "none" else "SYNC_FLUSH",
    })
    return properties

