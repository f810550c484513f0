"""A broker's registration flow with its name servers; its requests as a name server reads them."""

from __future__ import annotations

import json

from triomq.broker.metadata.core.topic_table import TopicTable
from triomq.broker.registration.core.namesrv_registration import (
    BrokerRegistrationInfo,
    Heartbeat,
    Register,
    RegistrationFlow,
    heartbeat_request,
    register_request,
    request_for,
)
from triomq.namesrv.core.processor import NameServerCore
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.route import TopicConfig

MASTER = BrokerRegistrationInfo("DefaultCluster", "broker-a", 0, "10.0.0.1:10911",
                                "10.0.0.1:10912", 3000)


def flow() -> RegistrationFlow:
    return RegistrationFlow(("ns1", "ns2"), register_period=30_000, heartbeat_interval=1_000,
                            retry_interval=500)


def test_registers_everywhere_at_start_then_heartbeats_between_registrations() -> None:
    f = flow()
    assert f.poll(0) == [] and f.next_wakeup() is None
    f.identify(MASTER, now=0)
    sent = f.poll(0)
    assert sent == [Register("ns1", MASTER), Register("ns2", MASTER)]
    assert f.poll(0) == []  # one in flight per name server
    for s in sent:
        f.answered(s, True, now=5)
    assert f.next_wakeup() == 1_005
    beats = f.poll(1_005)
    assert beats == [Heartbeat("ns1", MASTER), Heartbeat("ns2", MASTER)]
    for s in beats:
        f.answered(s, True, now=1_010)
    assert f.next_wakeup() == 2_010
    assert [type(s) for s in f.poll(30_005)] == [Register, Register]


def test_a_role_change_and_a_topic_change_register_at_once() -> None:
    f = flow()
    f.identify(MASTER, now=0)
    for s in f.poll(0):
        f.answered(s, True, now=0)
    f.topics_changed(now=100)
    in_flight = f.poll(100)
    assert [type(s) for s in in_flight] == [Register, Register]
    # A change while a registration is in flight: another goes once it answers.
    f.topics_changed(now=120)
    assert f.poll(120) == []
    for s in in_flight:
        f.answered(s, True, now=130)
    assert [type(s) for s in f.poll(130)] == [Register, Register]
    for s in (Register("ns1", MASTER), Register("ns2", MASTER)):
        f.answered(s, True, now=140)
    assert f.next_wakeup() == 1_140
    slave = BrokerRegistrationInfo("DefaultCluster", "broker-a", 2, "10.0.0.1:10911",
                                   "10.0.0.1:10912", 3000)
    f.identify(slave, now=150)
    # The old registrations are still in flight: the new one goes once they answer.
    for s in (Register("ns1", MASTER), Register("ns2", MASTER)):
        f.answered(s, True, now=160)
    assert f.poll(160) == [Register("ns1", slave), Register("ns2", slave)]


def test_failures_retry_and_a_refused_heartbeat_registers_again() -> None:
    f = flow()
    f.identify(MASTER, now=0)
    first, second = f.poll(0)
    f.answered(first, False, now=10)
    f.answered(second, True, now=10)
    assert f.poll(400) == []
    assert f.poll(510) == [Register("ns1", MASTER)]
    f.answered(Register("ns1", MASTER), True, now=520)
    beat = f.poll(1_010)
    assert beat == [Heartbeat("ns2", MASTER)]
    f.answered(beat[0], False, now=1_011)  # the name server restarted and forgot it
    assert f.poll(1_011) == [Register("ns2", MASTER)]


def test_the_requests_are_what_a_name_server_reads() -> None:
    core = NameServerCore()
    topics = TopicTable()
    topics.update(TopicConfig("orders", 4, 4, 6), now=1)
    for compressed in (True, False):
        answer = core.handle(register_request(MASTER, topics, compressed=compressed), "c", 0)
        assert answer.code == 0, answer.remark
    route = core.handle(_route("orders"), "c", 0)
    assert json.loads(route.body)["brokerDatas"][0]["brokerAddrs"] == {"0": "10.0.0.1:10911"}
    assert core.handle(heartbeat_request(MASTER), "c", 5).code == 0
    core.connection_closed("c")
    assert core.handle(_route("orders"), "c", 7).code == 17


def test_replies_from_a_name_server_drive_the_flow_and_name_the_master() -> None:
    core = NameServerCore()
    topics = TopicTable()
    slave = BrokerRegistrationInfo("DefaultCluster", "broker-a", 1, "10.0.0.2:10911",
                                   "10.0.0.2:10912", 3000)
    master = flow()
    master.identify(MASTER, now=0)
    for sent in master.poll(0):
        master.replied(sent, core.handle(request_for(sent, topics), "m", 0), now=1)
    assert master.registered("ns1") and master.master_address is None
    f = flow()
    f.identify(slave, now=0)
    first, second = f.poll(0)
    f.replied(first, core.handle(request_for(first, topics), "s", 0), now=1)
    f.replied(second, None, now=1)  # no answer came
    assert f.master_address == "10.0.0.1:10911"
    assert f.registered("ns1") and not f.registered("ns2")
    core.connection_closed("s")  # forgotten: the heartbeat is refused, a registration follows
    beat, retry = f.poll(1_001)
    assert (beat, retry) == (Heartbeat("ns1", slave), Register("ns2", slave))
    f.replied(beat, core.handle(request_for(beat, topics), "s", 1_001), now=1_002)
    assert f.poll(1_002) == [Register("ns1", slave)]


def _route(topic: str) -> RemotingCommand:
    return RemotingCommand.request(105, {"topic": topic})


def test_heartbeats_as_data_version_queries_for_an_old_name_server() -> None:
    f = RegistrationFlow(("ns1",), register_period=30_000, heartbeat_interval=1_000,
                         retry_interval=500, heartbeat_via_data_version=True)
    f.identify(MASTER, now=0)
    (register,) = f.poll(0)
    topics = TopicTable()
    core = NameServerCore()
    answer = core.handle(request_for(register, topics), "broker", 0)
    f.replied(register, answer, now=1)
    (beat,) = f.poll(1_001)
    assert beat == Heartbeat("ns1", MASTER, via_data_version=True)
    request = request_for(beat, topics)
    assert request.code == 322 and json.loads(request.body)["counter"] == 0
    # The name server counts it as a heartbeat and answers the DataVersion it holds.
    answer = core.handle(request, "broker", 9_000)
    assert answer.code == 0 and answer.ext_fields["changed"] == "false"
    assert core.route.next_expiry() == 9_000 + 3_000 + 1
    f.replied(beat, answer, now=9_000)
    assert f.next_wakeup() == 10_000
    # A name server that forgot the broker holds no DataVersion: it registers again at once.
    (beat,) = f.poll(10_000)
    f.replied(beat, NameServerCore().handle(request_for(beat, topics), "broker", 10_000),
              now=10_001)
    assert f.poll(10_001) == [Register("ns1", MASTER)]
