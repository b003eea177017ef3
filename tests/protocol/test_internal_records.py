"""Internal records (``__consumer_offsets``, ``__transaction_state``, the consumer
protocol's member metadata) against golden bytes: what each owner writes today, and every
version it reads. The bytes were taken from the hand-written encoders and checked against
their readers before the layouts moved to ``pykfk/protocol/internal.py``, so a declaration
that drifts from Kafka's layout fails here."""

from __future__ import annotations

import uuid

import pytest

from pykfk.client import group_member as gm
from pykfk.group import consumer_records as cr
from pykfk.group import offsets as o
from pykfk.group.share import state_records as sr
from pykfk.txn import records as tr

GOLDEN = {
    'offset_commit_key': '000100036772700007746f7069632d6100000003',
    'group_metadata_key': '00020003677270',
    'offset_commit_value_v3': '0003000000000000002a0000000500046d6574610000018bcfe56801',
    'offset_commit_value_v1': '0001000000000000002b00000000018bcfe568020000018bcff323a0',
    'offset_commit_value_v0': '0000000000000000002c0001780000018bcfe56803',
    'offset_commit_value_v2': '0002000000000000002e0001780000018bcfe56803',
    'offset_commit_value_v4': '000400000000000000300000000902780000018bcfe5680300',
    'group_metadata_value_v3': '00030008636f6e73756d657200000007000572616e676500036d2d310000018bcfe568000000000200036d2d310006696e73742d310008636c69656e742d61000a2f3132372e302e302e310000753000002710000000050001737562000000040002617300036d2d32ffff0008636c69656e742d62000a2f3132372e302e302e320000afc8000017700000000000000000',
    'group_metadata_value_v0': '00000008636f6e73756d657200000007ffffffff0000000100036d2d3100016300022f68000007d000000001730000000161',
    'group_metadata_value_v1': '00010008636f6e73756d657200000007ffffffff0000000100036d2d3100016300022f6800000bb8000007d000000001730000000161',
    'group_metadata_value_v2': '00020008636f6e73756d657200000007ffffffff0000018bcfe568040000000100036d2d3100016300022f6800000bb8000007d000000001730000000161',
    'group_metadata_value_v4': '000409636f6e73756d65720000000700000000018bcfe5680402046d2d3107696e73742d310263032f6800000bb8000007d0027302610000',
    'transaction_log_key': '0000000474782d31',
    'transaction_log_value_v0': '000000000000000003e900030000ea60010000000200016100000002000000000000000100016200000001000000020000018bcfe568050000018bcfe56806',
    'transaction_log_value_v1': '000100000000000003ea0004000003e804000000000000000007000000000000000800',
    # TransactionLogValue v1 as pykfk writes it (flexible; tagged fields only when not
    # their default): TXN_V0, then a commit handing over producer id 1003 (TXN_HANDOVER).
    'transaction_log_value_v1_written': '0001' '00000000000003e9' '0003' '0000ea60' '01'  # pid, epoch, timeout, Ongoing
                                        '03' '026103' '00000000' '00000001' '00'  # 2 entries: a [0, 1]
                                        '0262' '02' '00000002' '00'  # b [2]
                                        '0000018bcfe56805' '0000018bcfe56806' '00',  # timestamps, no tags
    'transaction_log_value_v1_handover': '0001' '00000000000003ea' '7fff' '0000ea60' '02'  # PrepareCommit at 32767
                                         '02' '0261' '02' '00000000' '00'  # a [0]
                                         '0000018bcfe56805' '0000018bcfe56806'
                                         '03' '00' '08' '00000000000003ea'  # 3 tags: 0 PreviousProducerId 1002
                                         '01' '08' '00000000000003eb'  # 1 NextProducerId 1003
                                         '02' '02' '0002',  # 2 ClientTransactionVersion 2
    'cg_key_3': '00030003677270',
    'cg_key_4': '00040003677270',
    'cg_key_5': '0005000367727000036d656d',
    'cg_key_6': '00060003677270',
    'cg_key_7': '0007000367727000036d656d',
    'cg_key_8': '0008000367727000036d656d',
    'cg_value_3': '0000000000050100080000000000000063',
    'cg_value_4': '00000212345678123456781234567812345678027400000002020000000002037231000000',
    'cg_value_5': '00000269000263032f68020274000000012c08756e69666f726d00',
    'cg_value_6': '00000000000600',
    'cg_value_7': '000002123456781234567812345678123456780300000000000000010000',
    'cg_value_8': '000000000006000000050002123456781234567812345678123456780200000001000100',
    'subscription': '000000000002000161000162ffffffff',
    'subscription_user_data': '000000000001000161000000027564',
    'assignment': '0000000000020001610000000100000001000162000000020000000000000002ffffffff',
    'assignment_user_data': '000000000000000000027564',
    # __share_group_state: Kafka's ShareSnapshotKey (type 0) and ShareSnapshotValue v0
    # (flexible: compact array, a tag section per struct).
    'share_snapshot_key': '00000001671234567812345678123456781234567800000001',
    'share_snapshot_value': '0000'  # value version 0
                            '0000' '00000003' '00000007' '0000000000000028'  # snapshot, state, leader epochs, start
                            '03' '0000000000000028' '0000000000000029' '00' '0002' '00'  # 2 batches, 40-41 AVAILABLE x2
                            '000000000000002a' '000000000000002a' '04' '0001' '00'  # 42 ARCHIVED x1
                            '00',
}


def golden(name: str) -> bytes:
    return bytes.fromhex(GOLDEN[name])


M1 = o.MemberRecord("m-1", "inst-1", "client-a", "/127.0.0.1", 30000, 10000, b"\x00\x01sub", b"\x00\x02as")
M2 = o.MemberRecord("m-2", None, "client-b", "/127.0.0.2", 45000, 6000, b"", b"")
GROUP_V3 = o.GroupMetadataRecord("consumer", 7, "range", "m-1", 1700000000000, (M1, M2))
OFFSET_V3 = o.OffsetAndMetadata(42, "meta", 1700000000001, 5)
OFFSET_V1 = o.OffsetAndMetadata(43, "", 1700000000002, -1, 1700000900000)
TXN_V0 = tr.TxnRecord(1001, 3, 60000, tr.TxnState.ONGOING, frozenset({("a", 1), ("a", 0), ("b", 2)}),
                      1700000000005, 1700000000006)
TXN_HANDOVER = tr.TxnRecord(1002, 32767, 60000, tr.TxnState.PREPARE_COMMIT, frozenset({("a", 0)}),
                            1700000000005, 1700000000006, previous_producer_id=1002, next_producer_id=1003,
                            client_transaction_version=2)
TOPIC_ID = uuid.UUID("12345678-1234-5678-1234-567812345678")
CG_VALUES = {
    3: {"epoch": 5, "metadata_hash": 99},
    4: {"topics": [{"topic_id": TOPIC_ID, "topic_name": "t", "num_partitions": 2,
                    "partition_metadata": [{"partition": 0, "racks": ["r1"]}]}]},
    5: {"instance_id": "i", "rack_id": None, "client_id": "c", "client_host": "/h", "subscribed_topic_names": ["t"],
        "subscribed_topic_regex": None, "rebalance_timeout_ms": 300, "server_assignor": "uniform"},
    6: {"assignment_epoch": 6},
    7: {"topic_partitions": [{"topic_id": TOPIC_ID, "partitions": [0, 1]}]},
    8: {"member_epoch": 6, "previous_member_epoch": 5, "state": 0,
        "assigned_partitions": [{"topic_id": TOPIC_ID, "partitions": [1]}], "partitions_pending_revocation": []},
}


def _plain(value: object) -> object:
    """A decoded struct as plain dicts and lists, to compare with what was encoded."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def test_consumer_offsets_records_as_written_and_every_version_read() -> None:
    assert o.encode_offset_commit_key("grp", "topic-a", 3) == golden("offset_commit_key")
    assert o.decode_key(golden("offset_commit_key")) == o.OffsetCommitKey("grp", "topic-a", 3)
    key_v0 = b"\x00\x00" + golden("offset_commit_key")[2:]  # key type 0: the 0.8.2 layout
    assert o.decode_key(key_v0) == o.OffsetCommitKey("grp", "topic-a", 3)
    assert o.encode_group_metadata_key("grp") == golden("group_metadata_key")
    assert o.decode_key(golden("group_metadata_key")) == o.GroupMetadataKey("grp")
    assert o.decode_key(golden("cg_key_5")) == o.UnknownKey(5)

    assert o.encode_offset_commit_value(OFFSET_V3) == golden("offset_commit_value_v3")
    assert o.encode_offset_commit_value(OFFSET_V1) == golden("offset_commit_value_v1")
    read = {v: o.decode_offset_commit_value(golden(f"offset_commit_value_v{v}")) for v in range(5)}
    assert read[3] == OFFSET_V3 and read[1] == OFFSET_V1
    assert read[0] == o.OffsetAndMetadata(44, "x", 1700000000003)
    assert read[2] == o.OffsetAndMetadata(46, "x", 1700000000003)
    assert read[4] == o.OffsetAndMetadata(48, "x", 1700000000003, 9)

    assert o.encode_group_metadata_value(GROUP_V3) == golden("group_metadata_value_v3")
    assert o.decode_group_metadata_value(golden("group_metadata_value_v3")) == GROUP_V3
    member = o.MemberRecord("m-1", None, "c", "/h", 3000, 2000, b"s", b"a")
    old = {v: o.decode_group_metadata_value(golden(f"group_metadata_value_v{v}")) for v in (0, 1, 2, 4)}
    assert old[0] == o.GroupMetadataRecord("consumer", 7, None, None, -1,
                                           (o.MemberRecord("m-1", None, "c", "/h", 2000, 2000, b"s", b"a"),))
    assert old[1] == o.GroupMetadataRecord("consumer", 7, None, None, -1, (member,))
    assert old[2] == o.GroupMetadataRecord("consumer", 7, None, None, 1700000000004, (member,))
    assert old[4].members[0].group_instance_id == "inst-1" and old[4].current_state_timestamp == 1700000000004

    for bad in (golden("offset_commit_key")[:-1], golden("offset_commit_key") + b"\x00", b"\x00\x01\xff\xff"):
        with pytest.raises(o.OffsetsRecordError):
            o.decode_key(bad)
    for bad_value in (b"\x00\x05" + golden("offset_commit_value_v3")[2:], golden("offset_commit_value_v3")[:-3]):
        with pytest.raises(o.OffsetsRecordError):
            o.decode_offset_commit_value(bad_value)
    with pytest.raises(o.OffsetsRecordError):
        o.encode_offset_commit_value(o.OffsetAndMetadata(1, "m" * 40000))


def test_consumer_group_records_as_written_and_read() -> None:
    for record_type in sorted(cr.RECORD_TYPES):
        key = cr.encode_key(record_type, "grp", "mem")
        assert key == golden(f"cg_key_{record_type}")
        member = "mem" if record_type in (5, 7, 8) else ""
        assert cr.decode_key(key) == cr.ConsumerGroupRecordKey(record_type, "grp", member)
        value = cr.encode_value(record_type, CG_VALUES[record_type])
        assert value == golden(f"cg_value_{record_type}")
        assert _plain(cr.decode_value(record_type, value)) == _plain(CG_VALUES[record_type])
    with pytest.raises(o.OffsetsRecordError):
        cr.decode_value(3, golden("cg_value_3") + b"\x00")


def test_transaction_log_records_as_written_and_every_version_read() -> None:
    assert tr.encode_key("tx-1") == golden("transaction_log_key")
    assert tr.decode_key(golden("transaction_log_key")) == "tx-1"
    assert tr.decode_key(b"\x00\x07" + golden("transaction_log_key")[2:]) is None
    assert tr.encode_value(TXN_V0) == golden("transaction_log_value_v1_written")
    assert tr.decode_value(golden("transaction_log_value_v1_written")) == TXN_V0
    assert tr.encode_value(TXN_HANDOVER) == golden("transaction_log_value_v1_handover")
    assert tr.decode_value(golden("transaction_log_value_v1_handover")) == TXN_HANDOVER
    assert tr.decode_value(golden("transaction_log_value_v0")) == TXN_V0
    assert tr.decode_value(golden("transaction_log_value_v1")) == tr.TxnRecord(
        1002, 4, 1000, tr.TxnState.COMPLETE_COMMIT, frozenset(), 7, 8)
    for bad in (golden("transaction_log_value_v0")[:-1], b"\x00\x02" + golden("transaction_log_value_v0")[2:]):
        with pytest.raises(tr.TxnRecordError):
            tr.decode_value(bad)


def test_consumer_protocol_member_metadata_as_written_and_read() -> None:
    assert gm.encode_subscription(["b", "a", "a"]) == golden("subscription")
    assert gm.encode_subscription(["a"], b"ud") == golden("subscription_user_data")
    assert gm.decode_subscription(golden("subscription")) == ["a", "b"]
    assert gm.decode_subscription(golden("subscription_user_data")) == ["a"]
    assert gm.encode_assignment({"b": [2, 0], "a": [1]}) == golden("assignment")
    assert gm.encode_assignment({}, b"ud") == golden("assignment_user_data")
    assert gm.decode_assignment(golden("assignment")) == {"a": [1], "b": [0, 2]}
    assert gm.decode_assignment(golden("assignment_user_data")) == {}
    assert gm.decode_subscription(golden("subscription") + b"\x00\x00\x00\x00") == ["a", "b"]  # v1's owned partitions
    for bad in (golden("subscription")[:5], golden("subscription")[:-4]):  # cut in the topics, no user data
        with pytest.raises(ValueError):
            gm.decode_subscription(bad)


def test_share_state_records_as_written_and_read() -> None:
    topic = uuid.UUID("12345678-1234-5678-1234-567812345678")
    snapshot = sr.ShareSnapshot(3, 40, [(40, 41, 0, 2), (42, 42, 4, 1)], leader_epoch=7)
    assert sr.snapshot_key("g", topic, 1) == golden("share_snapshot_key")
    assert sr.decode_snapshot_key(golden("share_snapshot_key")) == ("g", topic, 1)
    assert sr.snapshot_value(snapshot) == golden("share_snapshot_value")
    assert sr.decode_snapshot(golden("share_snapshot_value")) == snapshot
    assert sr.decode_snapshot_key(b"\x00\x01" + golden("share_snapshot_key")[2:]) is None  # another key type
    # Cut short, trailing bytes or an unknown version: ignored, as a newer broker's records.
    for bad in (golden("share_snapshot_value")[:-1], golden("share_snapshot_value") + b"\x00",
                b"\x00\x01" + golden("share_snapshot_value")[2:]):
        assert sr.decode_snapshot(bad) is None
