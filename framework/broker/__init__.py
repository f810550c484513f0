"""The broker role: a replica of a broker group, master or slave, with its HA service.

- ``config.BrokerConfig``: the ``[broker]`` table.
- ``replicas_manager.ReplicasManager``: role changes and the HA service.
- ``controller_flow.ControllerModeFlow``: controller mode's rules (pure), pumped
  by ``controller_mode.ControllerMode`` over trio and by the cluster simulation.
- ``processor.BrokerProcessor``: puts (SEND_MESSAGE_V2) and offset queries.
- ``batch_send.BatchSendHandler``: SEND_BATCH_MESSAGE through the same checks and put
  path; ``batch`` decodes RocketMQ's batch body (pure).
- ``send_v1.SendV1Handler``: SEND_MESSAGE, the send whose header spells its fields out
  (RocketMQ's Go client), read as the V2 header and served as one of those two.
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
