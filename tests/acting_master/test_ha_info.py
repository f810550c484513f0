"""EXCHANGE_BROKER_HA_INFO (906), with frames built as RocketMQ's ExchangeHAInfo headers:
a master answers where it is; a slave told by its master that it is back reconnects at
once (a returning master's pre-online does not wait out the slave's HA backoff); one from
any other HA address, or to a master, is refused and changes nothing."""

from __future__ import annotations

import pytest
from acting_nodes import Groups, acting_namesrv, create_topic, open_static_groups
from hypothesis import given
from hypothesis import strategies as st

from triomq.broker.core.role import BrokerRole
from triomq.broker.registration.core.ha_info import Answer, Follow, HaInfo, Refuse, exchange
from triomq.protocol.header_fields import HeaderFieldError
from triomq.testing.cluster import open_cluster

EXCHANGE_BROKER_HA_INFO, NO_PERMISSION, INVALID_PARAMETER = 906, 16, 29
OWN = HaInfo("10.0.0.1:10912", 4096, "10.0.0.1:10911")
MASTER_HA = "tcp://10.0.0.1:10912"


def test_the_rule() -> None:
    def ask(request: HaInfo, master: bool = False, static: bool = True):
        return exchange(request, broker_name="broker-a", master=master, static=static,
                        master_ha_address=MASTER_HA, own=OWN)

    assert ask(HaInfo(), master=True) == Answer(OWN)
    assert ask(HaInfo(), static=False) == Answer(OWN)  # named master, role still changing
    assert ask(HaInfo()) == Answer(HaInfo())
    assert ask(HaInfo(MASTER_HA, 0, "tcp://10.0.0.1:10911")) == Follow(MASTER_HA)
    refused = ask(HaInfo("tcp://10.6.6.6:1", 0, "tcp://10.0.0.1:10911"))
    assert isinstance(refused, Refuse) and refused.code == NO_PERMISSION
    assert "tcp://10.6.6.6:1 is not broker-a's master's" in refused.remark
    assert isinstance(ask(HaInfo(MASTER_HA), master=True), Refuse)
    assert "controller mode" in ask(HaInfo(MASTER_HA), static=False).remark  # type: ignore


@given(st.dictionaries(st.sampled_from(["masterHaAddress", "masterFlushOffset",
                                         "masterAddress", "x"]), st.text(max_size=24)))
def test_any_header_is_read_or_refused_naming_the_field(fields) -> None:
    try:
        info = HaInfo.parse(fields)
    except HeaderFieldError as exc:
        assert "EXCHANGE_BROKER_HA_INFO: header field 'masterFlushOffset'" in str(exc)
    else:
        assert HaInfo.parse(info.fields()) == info


@pytest.mark.parametrize("transport", ["inproc", "tcp"])
async def test_a_master_answers_and_a_stranger_is_refused(tmp_path, transport):
    async with open_static_groups(tmp_path, ("a0", "a1"), transport=transport) as (cluster, group):
        client = await cluster.start("client")
        await create_topic(client, cluster.node("a0").address, "orders")
        master, slave = cluster.broker("a0"), cluster.broker("a1")

        async def ask(node: str, fields: dict[str, str]):
            return await client.rpc.invoke(cluster.node(node).address,
                                           EXCHANGE_BROKER_HA_INFO, fields)

        answer = await ask("a0", {})
        ha = group.ha_address("a0").removeprefix("tcp://")
        assert answer.code == 0
        assert answer.ext_fields["masterHaAddress"] == ha
        assert answer.ext_fields["masterAddress"] == group.location("a0")
        assert int(answer.ext_fields["masterFlushOffset"]) >= 0
        assert (await ask("a1", {})).ext_fields == {}  # a slave has nothing to say

        stranger = {"masterHaAddress": "127.0.0.1:1", "masterFlushOffset": "0",
                    "masterAddress": group.location("a0")}
        answer = await ask("a1", stranger)
        assert answer.code == NO_PERMISSION
        assert "tcp://127.0.0.1:1 is not broker-a's master's" in answer.remark
        answer = await ask("a0", {**stranger, "masterHaAddress": ha})
        assert answer.code == NO_PERMISSION and "follows no one" in answer.remark
        answer = await ask("a1", {**stranger, "masterFlushOffset": "x"})
        assert answer.code == INVALID_PARAMETER and "'masterFlushOffset'" in answer.remark
        # Nothing changed: the slave still replicates from its master.
        await create_topic(client, cluster.node("a0").address, "more")
        await cluster.wait_for(lambda: slave.log.max_offset == master.log.max_offset
                               and "more" in slave.topics.table)
        assert slave.replicas.role is BrokerRole.SLAVE


@pytest.mark.parametrize("transport", ["inproc", "tcp"])
async def test_a_returning_master_does_not_wait_out_its_slaves_backoff(tmp_path, transport):
    """The slave's HA backoff is ten minutes and so is the master's pre-online wait: only
    the master's announcement brings the slave back in time."""
    ten_minutes = 600_000
    async with open_cluster(tmp_path, transport=transport, controllers=0, brokers=0,
                            namesrvs=1) as cluster:
        acting_namesrv(cluster)
        await cluster.start_namesrvs()
        group = Groups(cluster, pre_online_wait=ten_minutes)
        await group.start("a0")
        await group.start("a1", ha_reconnect_min=ten_minutes, ha_reconnect_max=ten_minutes)
        slave = cluster.broker("a1")
        await cluster.wait_for(lambda: bool(cluster.broker("a0").replicas.transferring_slaves))
        await cluster.kill("a0")
        await cluster.wait_for(lambda: slave.acting, timeout=20)

        await group.start("a0")
        master = cluster.broker("a0")
        await cluster.wait_for(lambda: not master.isolated, timeout=30)
        assert master.replicas.transferring_slaves == {slave.broker_id}
        await cluster.wait_for(lambda: not slave.acting, timeout=20)
