"""SEND_MESSAGE_V2 with arbitrary headers and bodies: a specific answer, never a leak.

Every answer is SUCCESS or a code that names what is wrong (never
SYSTEM_ERROR for bad input), and no remark shows a server path or a
traceback.
"""

from __future__ import annotations

from broker_nodes import Cluster
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from triomq.broker.core.codes import SEND_V2_FIELDS, RequestCode, ResponseCode

ALLOWED = {ResponseCode.SUCCESS, ResponseCode.MESSAGE_ILLEGAL, ResponseCode.INVALID_PARAMETER,
           ResponseCode.NO_PERMISSION, ResponseCode.TOPIC_NOT_EXIST}

numbers = st.one_of(st.integers(-2**70, 2**70).map(str), st.sampled_from(["", "x", "1.5"]))
texts = st.text(max_size=300)
topics = st.one_of(st.sampled_from(["orders", "TBW102", "SCHEDULE_TOPIC_XXXX", "%RETRY%g"]),
                   texts, st.text(alphabet="abc_-%|", min_size=120, max_size=300))
properties = st.one_of(
    texts,
    st.dictionaries(st.text(max_size=20), st.text(max_size=40), max_size=5).map(
        lambda d: "".join(f"{k}\x01{v}\x02" for k, v in d.items())))
# A well-formed header with some fields replaced by anything, or dropped.
base = st.fixed_dictionaries({
    "a": st.just("group"), "b": topics, "e": st.integers(0, 9).map(str),
    "f": st.just("0"), "g": st.just("1700000000000"), "h": st.just("0"),
    "i": properties, "j": st.just("0")})
headers = st.tuples(base, st.dictionaries(
    st.sampled_from(sorted(SEND_V2_FIELDS)), st.one_of(numbers, texts), max_size=3),
    st.lists(st.sampled_from(sorted(SEND_V2_FIELDS)), max_size=2)).map(
    lambda parts: {k: v for k, v in {**parts[0], **parts[1]}.items() if k not in parts[2]})
requests = st.lists(st.tuples(headers, st.binary(max_size=1200)), min_size=1, max_size=40)


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=requests)
async def test_every_send_gets_a_specific_answer_and_no_leak(tmp_path, batch) -> None:
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("a", extra="max_message_size = 1024") as a, \
            cluster.client() as client:
        for fields, body in batch:
            answer = await client.rpc.invoke(a.node.address, RequestCode.SEND_MESSAGE_V2,
                                             fields, body)
            remark = answer.remark or ""
            assert answer.code in ALLOWED, (fields, answer.code, remark)
            assert str(tmp_path) not in remark and "Traceback" not in remark
        assert a.replicas.is_master  # the broker kept serving
