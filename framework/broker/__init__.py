"""The broker role: a replica of a broker group, master or slave, with its HA service.

- ``config.BrokerConfig``: the ``[broker]`` table.
- ``replicas_manager.ReplicasManager``: role changes and the HA service.
- ``controller_flow.ControllerModeFlow``: controller mode's rules (pure), pumped
  by ``controller_mode.ControllerMode`` over trio and by the cluster simulation.
- ``put_flow.PutFlow``: one put (SEND_MESSAGE_V2, SEND_MESSAGE: the header spelt out, as
  RocketMQ's Go client sends it, SEND_BATCH_MESSAGE, and the broker's own puts), pure:
  its checks (``put_checks``), the append, the waits for the flush and the replicas, the
  answer; ``batch`` decodes RocketMQ's batch body (pure). Pumped by
  ``processor.BrokerProcessor`` over trio (with the offset queries) and by the cluster
  simulation's brokers.
- ``clients.ClientService``: heartbeats, consumer lists, NOTIFY_CONSUMER_IDS_CHANGED and
  ``config/subscriptionGroup.json``, over the pure ``client_table``, ``heartbeat`` and
  ``subscription_groups``.
- ``locks.QueueLockService``: LOCK_BATCH_MQ / UNLOCK_BATCH_MQ over the pure
  ``lock_table`` and ``lock_body``.
- ``queries.QueryService``: QUERY_MESSAGE, VIEW_MESSAGE_BY_ID, SEARCH_OFFSET_BY_TIMESTAMP,
  GET_EARLIEST_MSG_STORETIME; ``index_service.IndexService`` keeps RocketMQ's ``index/``
  files (``index_store``) from the commit log, the arithmetic in the pure ``index_file``
  and ``index_dispatch``.
- ``consume_stats_service.ConsumeStatsService``: GET_CONSUME_STATS (a group's offsets, lag
  and consume TPS per queue) over the pure ``consume_stats``, which also counts the
  messages pulls return.
- ``service.broker_service`` / ``broker_of``: the node service and its handle.
- ``plugin``: the hook that runs the service on ``role = "broker"`` nodes.
- ``client.Producer``: a small client that sends messages to a master.
"""
