"""A broker group's alive members, as a name server names them (one query, trio).

GET_BROKER_MEMBER_GROUP (901), or, for a name server older than RocketMQ 5
(``compatible_with_old_name_srv``), the route of the group's member topic
``rmq_sys_SYNC_BROKER_MEMBER_<brokerName>``, whose broker data lists the
group's registered members (RocketMQ's ``getBrokerMemberGroupCompatible``).
The acting master's watch and the strict queue locks ask it.
"""

from __future__ import annotations

import logging

from triomq.broker.registration.namesrv_client import rpc_address
from triomq.errors import TriomqError
from triomq.protocol.request_codes import RequestCode
from triomq.protocol.response_codes import ResponseCode
from triomq.protocol.route import BrokerMemberGroup, TopicRouteData
from triomq.protocol.topic_rules import SYNC_BROKER_MEMBER_GROUP_PREFIX
from triomq.rpc import RpcClient, RpcError

__all__ = ["query_member_group"]

log = logging.getLogger("triomq.broker")


async def query_member_group(rpc: RpcClient, namesrv: str, *, cluster: str, broker_name: str,
                             compatible: bool = False, timeout: float = 1.0
                             ) -> dict[int, str] | None:
    """The group's members by broker id as ``namesrv`` answers (``host:port``): none when
    it refuses (it knows no member of the group), None when it does not answer."""
    if compatible:
        code = RequestCode.GET_ROUTEINFO_BY_TOPIC
        fields = {"topic": SYNC_BROKER_MEMBER_GROUP_PREFIX + broker_name}
    else:
        code = RequestCode.GET_BROKER_MEMBER_GROUP
        fields = {"clusterName": cluster, "brokerName": broker_name}
    try:
        answer = await rpc.invoke(rpc_address(namesrv), code, fields, timeout=timeout)
        if answer.code != ResponseCode.SUCCESS:
            log.info("name server %s refused %s: %s (%d)", namesrv, RequestCode(code).name,
                     answer.remark, answer.code)
            return {}
        if not compatible:
            return dict(BrokerMemberGroup.decode(answer.body or b"").broker_addrs)
        for broker in TopicRouteData.decode(answer.body or b"").broker_datas:
            if broker.broker_name == broker_name and broker.cluster == cluster:
                return dict(broker.broker_addrs)
        return {}
    except (RpcError, TriomqError) as exc:
        log.info("%s to name server %s failed: %s", RequestCode(code).name, namesrv, exc)
        return None
