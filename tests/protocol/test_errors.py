"""pykfk.errors: the Kafka error code table and the mapping of core exceptions."""

from __future__ import annotations

import inspect

import kafka.errors
import pytest

from pykfk._core import errors as core_errors
from pykfk.errors import ErrorCode, KafkaError, error_code, error_for_core_exception


def test_codes_known_to_kafka_python_are_all_present():
    theirs = {
        cls.errno
        for cls in vars(kafka.errors).values()
        if inspect.isclass(cls) and isinstance(getattr(cls, "errno", None), int)
    }
    assert theirs <= {int(c) for c in ErrorCode}


def test_well_known_codes():
    assert ErrorCode.NONE == 0 and ErrorCode.UNKNOWN_SERVER_ERROR == -1
    assert ErrorCode.NOT_LEADER_OR_FOLLOWER == 6
    assert ErrorCode.UNSUPPORTED_VERSION == 35
    assert ErrorCode.INVALID_REQUEST == 42
    assert ErrorCode.INVALID_RECORD == 87
    values = [int(c) for c in ErrorCode]
    assert sorted(values) == list(range(-1, max(values) + 1))  # no gaps, no duplicates


@pytest.mark.parametrize(
    "code,retriable",
    [
        (ErrorCode.NOT_LEADER_OR_FOLLOWER, True),
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, True),
        (ErrorCode.REQUEST_TIMED_OUT, True),
        (ErrorCode.NOT_COORDINATOR, True),
        (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, True),
        (ErrorCode.NOT_ENOUGH_REPLICAS, True),
        (ErrorCode.OFFSET_OUT_OF_RANGE, False),
        (ErrorCode.MESSAGE_TOO_LARGE, False),
        (ErrorCode.REBALANCE_IN_PROGRESS, False),
        (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, False),
        (ErrorCode.INVALID_RECORD, False),
        (ErrorCode.NONE, False),
    ],
)
def test_retriable(code, retriable):
    assert code.retriable is retriable
    assert KafkaError(code).retriable is retriable


def test_kafka_error_carries_code_and_message():
    err = KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE, "offset 7 > 5")
    assert err.code is ErrorCode.OFFSET_OUT_OF_RANGE
    assert err.message == "offset 7 > 5"
    assert "OFFSET_OUT_OF_RANGE" in str(err) and "offset 7 > 5" in str(err)
    assert KafkaError(3).code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert error_code(30000) is ErrorCode.UNKNOWN_SERVER_ERROR


def test_core_exceptions_map_to_kafka_codes():
    assert (
        error_for_core_exception(core_errors.CorruptBatchError("bad crc", "crc"))
        is ErrorCode.CORRUPT_MESSAGE
    )
    assert (
        error_for_core_exception(core_errors.InvalidRecordError("bad")) is ErrorCode.INVALID_RECORD
    )
    assert (
        error_for_core_exception(core_errors.IndexCorruptError("x"))
        is ErrorCode.KAFKA_STORAGE_ERROR
    )
    too_large = core_errors.RecordTooLargeError("batch of 2000000 bytes", "batch_length")
    assert error_for_core_exception(too_large) is ErrorCode.MESSAGE_TOO_LARGE
    assert (
        error_for_core_exception(KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH))
        is ErrorCode.INVALID_PRODUCER_EPOCH
    )
    assert error_for_core_exception(RuntimeError()) is ErrorCode.UNKNOWN_SERVER_ERROR
