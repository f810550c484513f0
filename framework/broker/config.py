"""``[broker]``: a broker replica's identity, its HA replication and its puts.

Keys keep RocketMQ's names in snake_case (``haListenPort`` ->
``ha_listen_port``); times are in milliseconds. The HA keys are converted
to the drivers' own settings by ``master_config()`` / ``slave_config()``.

Static roles (until a controller assigns them): ``broker_id = 0`` is the
master of epoch ``master_epoch``; any other id is a slave of
``ha_master_address``::

    [broker]
    broker_name = "broker-a"
    broker_id = 1
    ha_master_address = "tcp://10.0.0.1:10912"
"""

from __future__ import annotations

from typing import Literal

import attrs

from triomq.broker.secondary.core.schedule import MAX_IN_FLIGHT
from triomq.broker.secondary.core.schedule_put import TimerSettings
from triomq.errors import ConfigError
from triomq.ha.master_driver import HAMasterConfig
from triomq.ha.slave_driver import HASlaveConfig
from triomq.protocol.delay_levels import DEFAULT_MESSAGE_DELAY_LEVEL, parse_delay_levels
from triomq.settings import non_negative, one_of, port, positive, setting
from triomq.store import FLUSH_POLICIES

__all__ = ["MASTER_ID", "BrokerConfig"]

#: The broker id of the master in static mode (RocketMQ's ``MixAll.MASTER_ID``).
MASTER_ID = 0


def _not_empty(value: str) -> str | None:
    return None if value else "must not be empty"


def _ha_address(value: str) -> str | None:
    if not value:
        return None
    if "://" not in value:
        return "expected 'scheme://location', e.g. 'tcp://10.0.0.1:10912'"
    return None


def _addresses(value: tuple[str, ...]) -> str | None:
    for address in value:
        if "://" not in address:
            return f"{address!r}: expected 'scheme://location' addresses, e.g. 'tcp://10.0.0.1:9878'"
    return None


def _namesrv_addresses(value: tuple[str, ...]) -> str | None:
    for address in value:
        location = address.partition("://")[2] if "://" in address else address
        host, sep, port = location.rpartition(":")
        if "://" not in address and not (sep and host and port.isdigit()):
            return f"{address!r}: expected 'host:port', e.g. '10.0.0.1:9876'"
    return None


def _at_least_one(value: int) -> str | None:
    return None if value >= 1 else "must be >= 1"


def _at_least_two(value: int) -> str | None:
    return None if value >= 2 else "must be >= 2"


def _delay_levels(value: str) -> str | None:
    try:
        parse_delay_levels(value)
    except ValueError as exc:
        return str(exc)
    return None


def _percent(value: int) -> str | None:
    return None if 0 <= value <= 100 else "must be a percentage, 0 to 100"


@attrs.frozen
class BrokerConfig:
    """One broker replica: identity, static role, HA replication and synchronous puts."""

    broker_name: str = setting(
        "broker-a", doc="The replica group this broker belongs to (RocketMQ's brokerName).",
        check=_not_empty)
    broker_id: int = setting(
        MASTER_ID, doc="This replica's id in its group; in static mode 0 is the master and "
                       "any other id a slave of ha_master_address.", check=non_negative)
    cluster_name: str = setting(
        "DefaultCluster", doc="The cluster the group belongs to (RocketMQ's brokerClusterName).",
        check=_not_empty)
    store_path_root_dir: str = setting(
        "", doc="Store root: the commit log ('commitlog/', 'consumequeue/') and the "
                "'epochFileCheckpoint' live here; an existing RocketMQ store is reused. "
                "Empty: the node's [store] path.")
    ha_listen_port: int = setting(
        10912, doc="TCP port the HA service accepts slaves on, on the host of the node's "
                   "'listen' address; 0 picks a free port.", check=port)
    vip_channel: bool = setting(
        False, doc="Also serve every request on the TCP listen port minus 2, RocketMQ's "
                   "'fast' remoting server (its VIP channel): RocketMQ's slaves dial it to "
                   "copy their master's topics, offsets and checkpoints. Needs a fixed "
                   "listen port.")
    ha_listen_address: str = setting(
        "", doc="Explicit HA listen address, e.g. 'inproc://broker-a-ha'; overrides "
                "ha_listen_port. Empty: derived from 'listen' (tcp: its host with "
                "ha_listen_port; other schemes: the listen address plus '-ha').",
        check=_ha_address)
    ha_master_address: str = setting(
        "", doc="The master's HA address a slave replicates from (static mode; required "
                "when broker_id != 0).", check=_ha_address)
    master_epoch: int = setting(
        1, doc="Static mode: the epoch the master serves; raise it when a restarted or new "
               "master starts a new term (never lower than the one recorded).",
        check=_at_least_one)
    ha_transfer_batch_size: int = setting(
        32 * 1024, doc="Largest batch of commit-log bytes in one transfer frame.",
        check=positive)
    ha_send_heartbeat_interval: int = setting(
        200, doc="ms between heartbeats: the master's empty transfers when idle and the "
                 "slave's periodic acks (RocketMQ: 5000).", check=positive)
    ha_max_time_slave_not_catchup: int = setting(
        2000, doc="ms a SyncStateSet member may go without catching up before the master "
                  "shrinks it out (RocketMQ: 15000). A member whose last HA connection "
                  "closes is shrunk out at once, as RocketMQ's master does; it rejoins once "
                  "it has caught up.", check=positive)
    check_sync_state_set_period: int = setting(
        500, doc="ms between the master's SyncStateSet shrink/expand checks (RocketMQ: 5000).",
        check=positive)
    all_ack_in_sync_state_set: bool = setting(
        False, doc="A put waits for every SyncStateSet member, instead of min_in_sync_replicas.")
    min_in_sync_replicas: int = setting(
        1, doc="Replicas (the master included) that must hold a put before it succeeds; a put "
               "fails at once when the SyncStateSet is smaller.", check=_at_least_one)
    sync_flush_timeout: int = setting(
        5000, doc="ms a put waits for its disk flush and its replication before it answers "
                  "FLUSH_DISK_TIMEOUT or FLUSH_SLAVE_TIMEOUT.", check=positive)
    flush_policy: Literal["group", "interval", "none"] = setting(
        "group", doc="Commit-log fsync: 'group' (a put waits for an fsync shared with the "
                     "puts around it), 'interval' (fsync every flush_interval; a put waits "
                     "for the next one), 'none' (left to the OS). A slave flushes 'group' "
                     "as 'interval'.", check=one_of(*FLUSH_POLICIES))
    flush_interval: int = setting(
        200, doc="ms between fsyncs with flush_policy 'interval' (and on slaves).",
        check=positive)
    is_sync_from_last_file: bool = setting(
        False, doc="An empty slave starts from the master's last segment instead of its "
                   "first byte.")
    is_async_learner: bool = setting(
        False, doc="The slave replicates but never joins the SyncStateSet.")
    ha_max_body_size: int = setting(
        64 * 1024 * 1024, doc="Largest frame body a slave accepts from its master (bytes).",
        check=positive)
    ha_reconnect_min: int = setting(
        100, doc="ms a slave waits before its first reconnect; doubles per failure.",
        check=positive)
    ha_reconnect_max: int = setting(
        5000, doc="ms cap of the slave's reconnect backoff.", check=positive)
    ha_handshake_timeout: int = setting(
        3000, doc="ms a connection to the HA port may take to send its slave handshake "
                  "before the master closes it.", check=positive)
    ha_write_timeout: int = setting(
        3000, doc="ms a master's send to a slave may make no progress before it drops the "
                  "slave (one that stopped reading); the SyncStateSet then shrinks it out, "
                  "as any slave whose connection closed.", check=positive)
    ha_max_connections: int = setting(
        64, doc="Connections the HA port serves at once while master (slaves and peers "
                "yet to send their handshake). When full, a new connection takes the slot "
                "of the oldest one without a handshake; slaves not named by a SyncStateSet "
                "hold at most one less; a replica of the group is always admitted.",
        check=_at_least_two)
    ha_receive_buffer_size: int = setting(
        4 * 1024 * 1024, doc="Bytes of socket receive buffer on a slave's TCP connection to "
                             "its master (SO_RCVBUF, capped by net.core.rmem_max; 0: the "
                             "kernel's autotuning, for links whose bandwidth-delay product "
                             "is larger).", check=non_negative)

    enable_controller_mode: bool = setting(
        False, doc="Take the role from the controllers: they allocate the broker id and "
                   "elect the master (broker_id, ha_master_address, master_epoch unused).")
    controller_addresses: tuple[str, ...] = setting(
        (), doc="RPC addresses of the controllers (controller mode), e.g. "
                "['tcp://10.0.0.1:9878', 'tcp://10.0.0.2:9878'].", check=_addresses)
    broker_heartbeat_interval: int = setting(
        100, doc="ms between heartbeats (with live info) to every controller (RocketMQ: "
                 "1000).", check=positive)
    controller_heartbeat_timeout: int = setting(
        0, doc="ms of silence after which the controllers count this broker inactive, sent "
               "with each heartbeat; 0: the controllers' broker_not_active_timeout "
               "(RocketMQ's controllerHeartBeatTimeoutMills).", check=non_negative)
    sync_controller_metadata_period: int = setting(
        500, doc="ms between polls of the controller for the group's master and "
                 "SyncStateSet, in case a notification was missed (RocketMQ's "
                 "syncBrokerMetadataPeriod: 5000).", check=positive)
    election_priority: int = setting(
        0, doc="Among equally up-to-date replicas a smaller value is elected first "
               "(RocketMQ's brokerElectionPriority).", check=non_negative)
    namesrv_addr: tuple[str, ...] = setting(
        (), doc="Name servers this broker registers with (RocketMQ's namesrvAddr), e.g. "
                "['10.0.0.1:9876', '10.0.0.2:9876']; an address with a scheme "
                "('inproc://ns') works too. Empty: the broker registers nowhere.",
        check=_namesrv_addresses)
    register_name_server_period: int = setting(
        30000, doc="ms between full registrations with every name server; a role or topic "
                   "change registers at once, heartbeats go every broker_heartbeat_interval "
                   "in between (RocketMQ: 30000).", check=positive)
    broker_not_active_timeout: int = setting(
        10000, doc="ms of silence after which name servers drop this broker from the routes, "
                   "sent as heartbeatTimeoutMillis with each registration (RocketMQ's "
                   "brokerNotActiveTimeoutMillis); a closed connection drops it at once.",
        check=positive)
    enable_slave_acting_master: bool = setting(
        False, doc="Slave acting master (RIP-32): when the group's master is gone, the "
                   "alive slave with the smallest broker id acts for it (the name servers "
                   "route it as a read-only master when they support_acting_master). Needs "
                   "namesrv_addr (RocketMQ's enableSlaveActingMaster).")
    enable_remote_escape: bool = setting(
        False, doc="An acting slave may send its secondary messages' output to a master of "
                   "another group of the cluster over the network (the 'remote' escape "
                   "bridge; RocketMQ's enableRemoteEscape).")
    acting_escape_bridges: tuple[str, ...] = setting(
        ("container", "remote"), doc="Escape bridges (triomq_escape_bridge names) a slave "
                                     "acting for its absent master puts its secondary "
                                     "messages' output through, tried in order: "
                                     "'container' is a master of another group of the "
                                     "cluster running in the same process, 'remote' one "
                                     "over the network (with enable_remote_escape).")
    sync_broker_member_group_period: int = setting(
        1000, doc="ms between GET_BROKER_MEMBER_GROUP polls of the name servers for the "
                  "group's alive members, with enable_slave_acting_master (RocketMQ's "
                  "syncBrokerMemberGroupPeriod).", check=positive)
    skip_pre_online: bool = setting(
        False, doc="A static master with enable_slave_acting_master registers at once, "
                   "without first taking back the newer consumer offsets, delay offsets and "
                   "timer checkpoint of the slaves that served while it was gone "
                   "(RocketMQ's skipPreOnline).")
    pre_online_wait: int = setting(
        15000, doc="ms a returning master waits at most, isolated, for its slaves to "
                   "reconnect and answer before it registers anyway (pre-online).",
        check=positive)
    lock_in_strict_mode: bool = setting(
        False, doc="An orderly consumer's queue lock needs a majority of total_replicas "
                   "replicas of the group to grant it, so that a master back from a failure "
                   "cannot lock a queue a consumer still holds on its acting slave "
                   "(RocketMQ's lockInStrictMode; the group's members come from the name "
                   "servers).")
    total_replicas: int = setting(
        1, doc="Replicas of the broker's group, masters and slaves: the majority a strict "
               "queue lock needs is total_replicas // 2 + 1 (RocketMQ's totalReplicas).",
        check=positive)
    compatible_with_old_name_srv: bool = setting(
        False, doc="For name servers older than RocketMQ 5: heartbeats go as "
                   "QUERY_DATA_VERSION and an acting master learns its group from the route "
                   "of topic rmq_sys_SYNC_BROKER_MEMBER_<broker_name>, which the broker then "
                   "registers (RocketMQ's compatibleWithOldNameSrv, true there; triomq's name "
                   "servers serve BROKER_HEARTBEAT and GET_BROKER_MEMBER_GROUP).")
    send_heartbeat_timeout: int = setting(
        1000, doc="ms a heartbeat to a name server, and a member-group poll, waits for its "
                  "answer (RocketMQ's sendHeartbeatTimeoutMillis).", check=positive)
    auto_create_topic_enable: bool = setting(
        True, doc="A send to an unknown topic creates it from the default topic TBW102 "
                  "(RocketMQ's autoCreateTopicEnable).")
    auto_create_topic_limit: int = setting(
        1024, doc="Topics the broker may hold for a send to create one more "
                  "(auto_create_topic_enable); beyond, such a send is refused with "
                  "TOPIC_NOT_EXIST. Topics an admin creates are not limited.",
        check=_at_least_one)
    default_topic_queue_nums: int = setting(
        8, doc="Queues of a topic created on send when the producer names no count, and of "
               "TBW102 (RocketMQ's defaultTopicQueueNums).", check=_at_least_one)
    max_message_size: int = setting(
        4 * 1024 * 1024, doc="Largest message body a send may carry, in bytes; a larger one is "
                             "refused with MESSAGE_ILLEGAL (RocketMQ's maxMessageSize).",
        check=_at_least_one)
    slave_synchronize_period: int = setting(
        3000, doc="ms between a slave's copies of its master's topic configs (RocketMQ's "
                  "slave synchronization: GET_ALL_TOPIC_CONFIG).", check=positive)
    auto_create_subscription_group: bool = setting(
        True, doc="A heartbeat from a consumer of an unknown group creates the group's "
                  "subscription config (config/subscriptionGroup.json; RocketMQ's "
                  "autoCreateSubscriptionGroup).")
    auto_create_subscription_group_limit: int = setting(
        1024, doc="Subscription groups the broker may hold for a consumer's heartbeat to "
                  "create one more (auto_create_subscription_group, with its retry topic); "
                  "beyond, the group is not created, and pulls and offset commits of a group "
                  "the broker does not hold are refused with SUBSCRIPTION_GROUP_NOT_EXIST. "
                  "Groups an admin creates are not limited.", check=_at_least_one)
    notify_consumer_ids_changed_enable: bool = setting(
        True, doc="Push NOTIFY_CONSUMER_IDS_CHANGED to a group's consumers when one joins or "
                  "leaves (a group's own notifyConsumerIdsChangedEnable may turn it off; "
                  "RocketMQ's notifyConsumerIdsChangedEnable).")
    channel_expired_timeout: int = setting(
        120000, doc="ms without a heartbeat after which a client is dropped and its connection "
                    "closed, checked every 10 s (RocketMQ's channelExpiredTimeout).",
        check=positive)
    rebalance_lock_max_live_time: int = setting(
        60000, doc="ms a queue lock (LOCK_BATCH_MQ) lasts unless its holder locks it again "
                   "(RocketMQ's rocketmq.broker.rebalance.lockMaxLiveTime).", check=positive)
    message_index_enable: bool = setting(
        True, doc="Index every record's keys (KEYS and UNIQ_KEY) in index/ for QUERY_MESSAGE "
                  "(RocketMQ's messageIndexEnable).")
    max_hash_slot_num: int = setting(
        5_000_000, doc="Hash slots of one index file (RocketMQ's maxHashSlotNum).",
        check=positive)
    max_index_num: int = setting(
        20_000_000, doc="Entries of one index file before the next is started, at least 2 "
                        "(entry 0 is never used; RocketMQ's maxIndexNum).", check=_at_least_two)
    default_query_max_num: int = setting(
        32, doc="Messages a QUERY_MESSAGE by unique key answers (RocketMQ's "
                "defaultQueryMaxNum).", check=positive)
    max_msgs_num_batch: int = setting(
        64, doc="Most messages one QUERY_MESSAGE answers (RocketMQ's maxMsgsNumBatch).",
        check=positive)

    slave_read_enable: bool = setting(
        False, doc="A slave serves pulls while its group has a master, and a pull far behind "
                   "the log's end is pointed at a slave (suggestWhichBrokerId 1); without it "
                   "a slave refuses pulls (SYSTEM_BUSY) unless its group has no master "
                   "(RocketMQ's slaveReadEnable).")
    lite_pull_message_enable: bool = setting(
        True, doc="Serve LITE_PULL_MESSAGE (361), the pull of RocketMQ 5's "
                  "DefaultLitePullConsumer; off, it is refused with NO_PERMISSION (RocketMQ's "
                  "litePullMessageEnable).")
    long_polling_enable: bool = setting(
        True, doc="A pull that finds nothing is held until a message arrives or its "
                  "suspendTimeoutMillis ends; off, it is held short_polling_time_mills "
                  "(RocketMQ's longPollingEnable).")
    short_polling_time_mills: int = setting(
        1000, doc="ms a pull that finds nothing is held when long_polling_enable is off "
                  "(RocketMQ's shortPollingTimeMills).", check=positive)
    offset_check_in_slave: bool = setting(
        False, doc="A slave answers a pull out of its queue's range with PULL_OFFSET_MOVED "
                   "and the corrected offset, as a master does; off, it answers "
                   "PULL_RETRY_IMMEDIATELY and moves no offset (RocketMQ's "
                   "offsetCheckInSlave).")
    access_message_in_memory_max_ratio: int = setting(
        40, doc="Percent of the machine's memory, counted back from the commit log's end, "
                "whose records a pull reads as in memory (the _in_memory transfer caps); a "
                "pull further behind is pointed at a slave with slave_read_enable (RocketMQ's "
                "accessMessageInMemoryMaxRatio).", check=_percent)
    max_transfer_bytes_on_message_in_memory: int = setting(
        256 * 1024, doc="Most bytes of records in memory one pull answers (the first record "
                        "always goes; RocketMQ's maxTransferBytesOnMessageInMemory).",
        check=positive)
    max_transfer_count_on_message_in_memory: int = setting(
        32, doc="Most records in memory one pull answers (RocketMQ's "
                "maxTransferCountOnMessageInMemory).", check=positive)
    max_transfer_bytes_on_message_in_disk: int = setting(
        64 * 1024, doc="Most bytes of records beyond the memory window one pull answers "
                       "(RocketMQ's maxTransferBytesOnMessageInDisk).", check=positive)
    max_transfer_count_on_message_in_disk: int = setting(
        8, doc="Most records beyond the memory window one pull answers (RocketMQ's "
               "maxTransferCountOnMessageInDisk).", check=positive)
    max_filter_message_size: int = setting(
        16000, doc="Bytes of consume-queue entries (20 each) one pull reads looking for "
                   "records its subscription takes, when maxMsgNums asks for fewer "
                   "(RocketMQ's maxFilterMessageSize).", check=positive)
    flush_consumer_offset_interval: int = setting(
        5000, doc="ms between writes of config/consumerOffset.json when offsets changed; it "
                  "is written on stop too (RocketMQ's flushConsumerOffsetInterval). A slave "
                  "copies its master's offsets every slave_synchronize_period.",
        check=positive)
    consumer_offset_update_version_step: int = setting(
        500, doc="Offset commits between two steps of consumerOffset.json's dataVersion "
                 "(RocketMQ's consumerOffsetUpdateVersionStep).", check=positive)
    reject_transaction_message: bool = setting(
        False, doc="Refuse half messages (TRAN_MSG) with NO_PERMISSION (RocketMQ's "
                   "rejectTransactionMessage).")
    transaction_time_out: int = setting(
        6000, doc="ms after its birth before a half message with no end is checked with its "
                  "producer; a message's CHECK_IMMUNITY_TIME_IN_SECONDS may ask for longer "
                  "(RocketMQ's transactionTimeOut).", check=positive)
    transaction_check_max: int = setting(
        15, doc="Checks of a half message before it is discarded into "
                "TRANS_CHECK_MAX_TIME_TOPIC (RocketMQ's transactionCheckMax).", check=positive)
    transaction_check_interval: int = setting(
        30000, doc="ms between two scans of the half messages for the ones to check "
                   "(RocketMQ's transactionCheckInterval).", check=positive)
    message_delay_level: str = setting(
        DEFAULT_MESSAGE_DELAY_LEVEL,
        doc="The delay of each level of delayed messages (a put's DELAY property), level 1 "
            "first, space-separated, each a number and a unit of ms, s, m, h or d; a level "
            "past the last is the last (RocketMQ's messageDelayLevel).",
        check=_delay_levels)
    flush_delay_offset_interval: int = setting(
        10_000, doc="ms between writes of config/delayOffset.json, where each delay level's "
                    "delivery has reached; it is written on stop too (RocketMQ's "
                    "flushDelayOffsetInterval).", check=positive)
    delay_offset_update_version_step: int = setting(
        200, doc="Delivery offset moves between two steps of delayOffset.json's dataVersion "
                 "(RocketMQ's delayOffsetUpdateVersionStep).", check=positive)
    schedule_max_in_flight: int = setting(
        MAX_IN_FLIGHT,
        doc="Delayed messages of one level put through the escape bridge at once, each "
            "waiting for its PUT_OK; a level's offset moves only past those stored, and "
            "those in flight together may land in any order; 1 delivers one at a time, "
            "in order, as RocketMQ does by default (its enableScheduleAsyncDeliver = "
            "true with scheduleAsyncDeliverMaxPendingLimit is the like of a larger "
            "value).", check=positive)
    timer_wheel_enable: bool = setting(
        True, doc="Timer messages (a put's TIMER_DELIVER_MS, TIMER_DELAY_SEC or TIMER_DELAY_MS) "
                  "wait in rmq_sys_wheel_timer and the master's timer wheel delivers them; "
                  "off, they are refused with SYSTEM_ERROR (RocketMQ's timerWheelEnable).")
    timer_max_delay_sec: int = setting(
        3 * 24 * 3600, doc="The furthest ahead, in s, a timer message's delivery may be; further "
                           "is refused with MESSAGE_ILLEGAL (RocketMQ's timerMaxDelaySec).",
        check=positive)
    timer_precision_ms: int = setting(
        1000, doc="ms of one slot of the timer wheel: a timer message is delivered at or after "
                  "its time, less than this after it; a client's TIMER_DELIVER_MS more than "
                  "this before the broker's clock is refused (RocketMQ's timerPrecisionMs).",
        check=positive)
    timer_flush_interval_ms: int = setting(
        1000, doc="ms between writes of config/timerCheckpoint.json, where the timer wheel's "
                  "delivery has reached, when it moved; it is written on stop too (RocketMQ's "
                  "timerFlushIntervalMs).", check=positive)

    @property
    def timer(self) -> TimerSettings:
        """The timer-message settings a put routes by."""
        return TimerSettings(enable=self.timer_wheel_enable,
                             max_delay_sec=self.timer_max_delay_sec,
                             precision_ms=self.timer_precision_ms)

    revive_queue_num: int = setting(
        8, doc="Queues of the revive topic rmq_sys_REVIVE_LOG_<cluster>, where pops write "
               "their checkpoints and acks, each revived by its own flow (RocketMQ's "
               "reviveQueueNum).", check=positive)
    revive_interval: int = setting(
        1000, doc="ms between two scans of a revive queue for acks and checkpoints whose "
                  "invisible time ran out (RocketMQ's reviveInterval).", check=positive)
    pop_from_retry_probability: int = setting(
        20, doc="Percent of pops that read the group's pop retry topic before the topic; "
                "the others read it after, when not full (RocketMQ's "
                "popFromRetryProbability).", check=_percent)

    def __attrs_post_init__(self) -> None:
        if self.enable_controller_mode and not self.controller_addresses:
            raise ConfigError("required in controller mode", "controller_addresses")
        if (self.broker_id != MASTER_ID and not self.ha_master_address
                and not self.enable_controller_mode):
            raise ConfigError(
                f"required for a slave (broker_id = {self.broker_id})", "ha_master_address")
        if self.enable_slave_acting_master and not self.namesrv_addr:
            raise ConfigError("needs namesrv_addr: a slave learns from the name servers "
                              "that its master is gone", "enable_slave_acting_master")
        if self.lock_in_strict_mode and not self.namesrv_addr:
            raise ConfigError("needs namesrv_addr: a strict lock asks the group's other "
                              "replicas, which the name servers name", "lock_in_strict_mode")
        if self.enable_slave_acting_master and not self.acting_escape_bridges:
            raise ConfigError("needs a bridge at least: an acting slave never writes its "
                              "own log", "acting_escape_bridges")
        if self.ha_reconnect_max < self.ha_reconnect_min:
            raise ConfigError(
                f"must be >= ha_reconnect_min ({self.ha_reconnect_min}), "
                f"got {self.ha_reconnect_max}", "ha_reconnect_max")

    @property
    def delay_levels(self) -> tuple[int, ...]:
        """``message_delay_level``'s delays in ms, level 1 first."""
        return parse_delay_levels(self.message_delay_level)

    @property
    def is_master(self) -> bool:
        """Static mode: this broker starts as its group's master."""
        return self.broker_id == MASTER_ID

    def master_config(self) -> HAMasterConfig:
        """The HA master driver's settings."""
        return HAMasterConfig(
            ha_transfer_batch_size=self.ha_transfer_batch_size,
            ha_send_heartbeat_interval=self.ha_send_heartbeat_interval,
            ha_max_time_slave_not_catchup=self.ha_max_time_slave_not_catchup,
            check_sync_state_set_period=self.check_sync_state_set_period,
            all_ack_in_sync_state_set=self.all_ack_in_sync_state_set,
            min_in_sync_replicas=self.min_in_sync_replicas,
            ha_handshake_timeout=self.ha_handshake_timeout,
            ha_write_timeout=self.ha_write_timeout,
            ha_max_connections=self.ha_max_connections,
        )

    def slave_config(self) -> HASlaveConfig:
        """The HA slave driver's settings."""
        return HASlaveConfig(
            is_sync_from_last_file=self.is_sync_from_last_file,
            is_async_learner=self.is_async_learner,
            ha_send_heartbeat_interval=self.ha_send_heartbeat_interval,
            max_body_size=self.ha_max_body_size,
            reconnect_min=self.ha_reconnect_min,
            reconnect_max=self.ha_reconnect_max,
            receive_buffer_size=self.ha_receive_buffer_size,
        )
