"""The transaction cores without an event loop: half messages, END_TRANSACTION, the check."""

from __future__ import annotations

import attrs

from triomq.broker.core.codes import ResponseCode
from triomq.broker.secondary.core.transaction import (
    CHECK_MAX_TIME_TOPIC,
    HALF_TOPIC,
    OP_HALF_TOPIC,
    Commit,
    EndTransactionHeader,
    Rollback,
    TransactionLedger,
    end_transaction,
    half_message,
    is_prepared,
    op_offsets,
    transaction_key,
)
from triomq.broker.secondary.core.transaction_check import (
    CheckSettings,
    Discard,
    HalfEntry,
    Renew,
    Skip,
    check_request,
    op_progress,
    plan_round,
)
from triomq.client.core.message import MessageQueue, SendResult, SendStatus, decode_messages
from triomq.client.core.transaction import (
    LocalTransactionState,
    check_end_fields,
    end_fields,
    local_state,
)
from triomq.protocol.message import MessageRecord

NOW = 1_700_000_100_000
SETTINGS = CheckSettings(transaction_time_out=6000, transaction_check_max=15,
                         transaction_check_interval=30000)


def sent(**changes) -> MessageRecord:
    record = MessageRecord(
        topic="orders", body=b"paid", queue_id=3, sys_flag=4 | 2,
        born_timestamp=NOW - 60_000, store_timestamp=NOW - 60_000,
        properties={"TRAN_MSG": "true", "PGROUP": "tx", "UNIQ_KEY": "ID1"})
    return attrs.evolve(record, **changes)


def stored_half(queue_offset: int = 7, physical_offset: int = 4096, **changes) -> MessageRecord:
    return attrs.evolve(half_message(sent(**changes)), queue_offset=queue_offset,
                        physical_offset=physical_offset)


def header(how: int, **changes) -> EndTransactionHeader:
    fields = {"producer_group": "tx", "tran_state_table_offset": 7, "commit_log_offset": 4096,
              "commit_or_rollback": how, "from_transaction_check": False, "msg_id": "ID1"}
    return EndTransactionHeader(**{**fields, **changes})


def test_a_prepared_put_is_stored_as_a_half_message() -> None:
    half = half_message(sent())
    assert (half.topic, half.queue_id, half.sys_flag) == (HALF_TOPIC, 0, 2)
    assert half.properties == {"TRAN_MSG": "true", "PGROUP": "tx", "UNIQ_KEY": "ID1",
                               "__transactionId__": "ID1", "REAL_TOPIC": "orders",
                               "REAL_QID": "3"}
    assert is_prepared({"TRAN_MSG": "True"})
    assert not is_prepared({"TRAN_MSG": "yes"}) and not is_prepared({})
    # A retried message sent back with a delay level goes on as it is (RocketMQ's rule).
    assert not is_prepared({"TRAN_MSG": "true", "DELAY": "3"}, reconsume_times=1)


def test_commit_restores_the_real_message_then_writes_the_op_record() -> None:
    decision = end_transaction(header(8), stored_half(), ended={}, now_ms=NOW,
                               transaction_time_out=6000)
    assert isinstance(decision, Commit) and decision.key == 7
    real = decision.real
    assert (real.topic, real.queue_id, real.body, real.sys_flag) == ("orders", 3, b"paid", 8 | 2)
    assert real.properties == {"PGROUP": "tx", "UNIQ_KEY": "ID1", "__transactionId__": "ID1"}
    assert real.born_timestamp == NOW - 60_000
    assert real.prepared_transaction_offset == 4096  # the half message's commit-log offset
    op = decision.op
    assert (op.topic, op.queue_id, op.body, op.properties) == (OP_HALF_TOPIC, 0, b"7,",
                                                               {"TAGS": "d"})
    rollback = end_transaction(header(12), stored_half(), ended={}, now_ms=NOW,
                               transaction_time_out=6000)
    assert rollback == Rollback(7, op)
    assert end_transaction(header(0), stored_half(), ended={}, now_ms=NOW,
                           transaction_time_out=6000) is None


def test_bad_ends_are_refused_with_their_remarks() -> None:
    def refusal(head: EndTransactionHeader, half: MessageRecord | None, ended=None):
        answer = end_transaction(head, half, ended=ended or {}, now_ms=NOW,
                                 transaction_time_out=6000)
        return answer.code, answer.remark

    half = stored_half()
    assert refusal(header(8), None) == (ResponseCode.SYSTEM_ERROR,
                                        "Find prepared transaction message failed")
    assert refusal(header(8), sent())[1].endswith("is not a half message (topic orders)")
    assert refusal(header(8, producer_group="x"), half)[1] == "The producer group wrong"
    assert refusal(header(8, tran_state_table_offset=1), half)[1] == \
        "The transaction state table offset wrong"
    assert refusal(header(8, commit_log_offset=1), half)[1] == "The commit log offset wrong"
    code, remark = refusal(header(12), half, {7: "commit"})
    assert code == ResponseCode.ILLEGAL_OPERATION and "already ended (commit)" in remark
    # Past a custom immunity time only a check's answer ends it (rejectCommitOrRollback).
    immune = stored_half(properties={**sent().properties,
                                     "CHECK_IMMUNITY_TIME_IN_SECONDS": "10"})
    assert refusal(header(8), immune)[0] == ResponseCode.ILLEGAL_OPERATION
    assert isinstance(end_transaction(header(8, from_transaction_check=True), immune, ended={},
                                      now_ms=NOW, transaction_time_out=6000), Commit)


def test_a_copy_ends_the_transaction_of_the_half_message_it_copies() -> None:
    copy = stored_half(20, 9000, properties={**sent().properties,
                                             "TRAN_PREPARED_QUEUE_OFFSET": "7"})
    assert transaction_key(copy) == 7
    decision = end_transaction(header(8, tran_state_table_offset=20, commit_log_offset=9000),
                               copy, ended={}, now_ms=NOW, transaction_time_out=6000)
    assert isinstance(decision, Commit) and decision.key == 7
    assert decision.op.body == b"20,"  # the copy's own offset, as RocketMQ writes it
    assert "TRAN_PREPARED_QUEUE_OFFSET" in decision.real.properties
    ledger = TransactionLedger()
    ledger.read_op(0, [7])
    assert ledger.ended == {7: "ended"} and ledger.op_read == 1
    ledger.read_commit(stored_half(20, properties={**sent().properties,
                                                   "TRAN_PREPARED_QUEUE_OFFSET": "9"}))
    assert ledger.ended[9] == "commit"
    ledger.begin(8, "rollback")
    ledger.abandon(8)
    assert 8 not in ledger.ended
    op = MessageRecord(topic=OP_HALF_TOPIC, body=b"3,4,", properties={"TAGS": "d"})
    assert op_offsets(op) == [3, 4]
    assert op_offsets(attrs.evolve(op, properties={})) == []


def test_a_round_checks_discards_renews_and_stops_at_the_young() -> None:
    ended_half = stored_half(0)
    old = stored_half(1)
    tired = stored_half(2, properties={**sent().properties, "TRANSACTION_CHECK_TIMES": "15"})
    immune = stored_half(3, born_timestamp=NOW - 8000,
                         properties={**sent().properties,
                                     "CHECK_IMMUNITY_TIME_IN_SECONDS": "60"})
    young = stored_half(5, born_timestamp=NOW - 1000)
    after = stored_half(6)
    entries = [HalfEntry(0, ended_half), HalfEntry(1, old), HalfEntry(2, tired),
               HalfEntry(3, immune), HalfEntry(4, None), HalfEntry(5, young), HalfEntry(6, after)]
    plan = plan_round(entries, {0: "commit"}, SETTINGS, start=0, now_ms=NOW)
    skip, check, discard, renew, gone = plan.actions
    assert plan.stop == 5  # the young one and every one behind it wait
    assert skip == Skip(0) and gone == Skip(4)
    assert isinstance(check, Renew) and check.check and check.group == "tx"
    assert check.message.topic == HALF_TOPIC
    assert check.message.properties["TRANSACTION_CHECK_TIMES"] == "1"
    assert check.message.properties["TRAN_PREPARED_QUEUE_OFFSET"] == "1"
    assert isinstance(discard, Discard) and discard.message.topic == CHECK_MAX_TIME_TOPIC
    assert discard.message.properties["REAL_TOPIC"] == "orders"
    assert isinstance(renew, Renew) and not renew.check
    assert "TRANSACTION_CHECK_TIMES" not in renew.message.properties
    # Nothing to look at: the progress stays.
    assert plan_round([], {}, SETTINGS, start=9, now_ms=NOW).stop == 9


def test_the_op_progress_passes_only_records_behind_the_half_progress() -> None:
    assert op_progress(10, [[1], [2, 3], [9], [4]], half_progress=5) == 12
    assert op_progress(10, [], half_progress=5) == 10


def test_a_check_request_carries_the_copy_in_its_real_topic() -> None:
    copy = attrs.evolve(stored_half(20, 9000), store_host=("10.0.0.1", 10911))
    request = check_request(copy, "broker-a")
    assert request.group == "tx"
    assert request.fields == {
        "topic": HALF_TOPIC, "tranStateTableOffset": "20", "commitLogOffset": "9000",
        "offsetMsgId": "0A00000100002A9F0000000000002328", "msgId": "ID1",
        "transactionId": "ID1", "bname": "broker-a"}
    (message,) = decode_messages(request.body)
    assert (message.topic, message.queue_id, message.body) == ("orders", 3, b"paid")
    # The producer's answer to it.
    answer = check_end_fields(request.fields, message, LocalTransactionState.COMMIT_MESSAGE,
                              "tx")
    assert answer == {"topic": "orders", "producerGroup": "tx", "tranStateTableOffset": "20",
                      "commitLogOffset": "9000", "commitOrRollback": "8",
                      "fromTransactionCheck": "true", "msgId": "ID1", "transactionId": "ID1",
                      "bname": "broker-a"}


def test_the_producer_ends_what_its_half_send_placed() -> None:
    result = SendResult(SendStatus.SEND_OK, "ID1", "0A00000100002A9F0000000000001000",
                        MessageQueue("orders", "broker-a", 3), 7)
    assert local_state(result) is None
    assert local_state(attrs.evolve(result, send_status=SendStatus.FLUSH_SLAVE_TIMEOUT)) is \
        LocalTransactionState.ROLLBACK_MESSAGE
    assert end_fields(result, LocalTransactionState.UNKNOW, "tx") == {
        "topic": "orders", "producerGroup": "tx", "tranStateTableOffset": "7",
        "commitLogOffset": "4096", "commitOrRollback": "0", "fromTransactionCheck": "false",
        "msgId": "ID1", "transactionId": "ID1", "bname": "broker-a"}
