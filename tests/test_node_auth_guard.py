"""A node's one guard: admin requests need the admin's credential, internal ones the
cluster's, and a node with the cluster's secret signs what it sends by itself.

Nodes over the in-process transport; the rule itself is ``tests/test_node_auth.py``'s.
"""

from __future__ import annotations

from triomq.cli_credentials import Signer
from triomq.config import SecurityConfig
from triomq.namesrv.core.processor import RequestCode

ADMIN = {"admin_access_key": "ops", "admin_secret_key": "ops-secret"}
INNER = {"inner_client_access_key": "cluster", "inner_client_secret_key": "cluster-secret"}
NO_PERMISSION = 16
UNREGISTER = {"clusterName": "DefaultCluster", "brokerName": "broker-a", "brokerId": "0",
              "brokerAddr": "127.0.0.1:10911"}


async def test_admin_and_internal_requests_each_need_their_own_credential(temporary_node):
    async with temporary_node("ns", role="nameserver", listen="inproc://ns-guard",
                              security=SecurityConfig(**ADMIN, **INNER)), \
            temporary_node("peer", security=SecurityConfig(**INNER)) as peer, \
            temporary_node("stranger") as stranger:
        address = "inproc://ns-guard"
        # A stranger: internal requests refused, admin ones too, the rest open.
        answer = await stranger.rpc.invoke(address, RequestCode.UNREGISTER_BROKER,
                                           UNREGISTER)
        assert answer.code == NO_PERMISSION
        assert answer.remark.startswith("UNREGISTER_BROKER (104) is cluster-internal")
        answer = await stranger.rpc.invoke(address, RequestCode.DELETE_TOPIC_IN_NAMESRV,
                                           {"topic": "t"})
        assert answer.code == NO_PERMISSION and "needs admin access" in answer.remark
        answer = await stranger.rpc.invoke(
            address, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        assert answer.code == 0
        # The admin's signature opens admin requests, not internal ones.
        stranger.rpc.sign = Signer("ops", "ops-secret")
        answer = await stranger.rpc.invoke(address, RequestCode.DELETE_TOPIC_IN_NAMESRV,
                                           {"topic": "t"})
        assert answer.code == 0, answer.remark
        answer = await stranger.rpc.invoke(address, RequestCode.UNREGISTER_BROKER,
                                           UNREGISTER)
        assert answer.code == NO_PERMISSION and "is not the cluster's" in answer.remark
        # A node with the cluster's secret signs its internal requests itself, and only
        # those: its admin requests still need the admin's credential.
        answer = await peer.rpc.invoke(address, RequestCode.UNREGISTER_BROKER, UNREGISTER)
        assert answer.code != NO_PERMISSION, answer.remark
        answer = await peer.rpc.invoke(address, RequestCode.DELETE_TOPIC_IN_NAMESRV,
                                       {"topic": "t"})
        assert answer.code == NO_PERMISSION and "needs admin access" in answer.remark
