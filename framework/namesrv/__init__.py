"""The name server: routes from topics to broker groups, and which brokers are alive.

- ``route_info.RouteInfo``: the route table, pure (RocketMQ's ``RouteInfoManager``).
"""
