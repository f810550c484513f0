"""The broker role: a replica of a broker group, master or slave, with its HA service.

- ``config.BrokerConfig``: the ``[broker]`` table.
- ``replicas_manager.ReplicasManager``: role changes and the HA service.
- ``processor.BrokerProcessor``: puts (SEND_MESSAGE_V2) and offset queries.
- ``service.broker_service`` / ``broker_of``: the node service and its handle.
- ``plugin``: the hook that runs the service on ``role = "broker"`` nodes.
- ``client.Producer``: a small client that sends messages to a master.
"""
