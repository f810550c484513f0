"""The broker role: a replica of a broker group, master or slave, with its HA service.

``service.broker_service`` runs the broker as a list of components
(``components``), each started with the role it needs; ``config.BrokerConfig``
is the ``[broker]`` table. One package per concern, its pure rules in ``core/``
(no trio, clock, file or socket: import-linter checks every ``core`` package)
and its trio drivers beside them:

- ``core``: response codes, request headers, identity, role, broker properties, the
  escape bridge (``EscapeBridge``, ``LocalEscapeBridge``).
- ``send``: one put, ``core.put_flow`` (its checks ``core.put_checks``, RocketMQ's
  batch body ``core.batch``), pumped by ``processor.BrokerProcessor`` and by the
  cluster simulation's brokers.
- ``consume``: pulls (``core.pull_flow`` pumped by ``pull_service``), consumer offsets,
  heartbeats, consumer lists and ``config/subscriptionGroup.json`` (``clients``), queue
  locks (``locks``).
- ``metadata``: the topic table (``core.topic_table``, ``topics``) and the JSON config
  files (``config_files``).
- ``replication``: ``replicas_manager.ReplicasManager`` (role changes and the HA
  service), controller mode (``core.controller_flow`` pumped by ``controller_mode``),
  the confirm offset checkpoint.
- ``registration``: registration with the name servers.
- ``secondary``: delayed messages, retries and dead letters, transactions.
- ``index``: RocketMQ's ``index/`` files and the message queries.
- ``admin``: GET_BROKER_RUNTIME_INFO and GET_CONSUME_STATS.
"""
