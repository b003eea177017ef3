"""Control batches (transaction markers) are written by the broker only: a client's
Produce carrying one is refused with INVALID_RECORD and nothing is stored. (A marker is
a transactional batch: sent without a transactional id it is refused before its records
are looked at, with TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka does.)"""

from __future__ import annotations

import pytest

from pykfk._core.records import build_batch
from pykfk.errors import ErrorCode
from pykfk.testing import RawClient
from tests.server.test_handlers import create_topic, list_offset, produce

# A COMMIT marker's record: key = version 0, type 1; value = version 0, coordinator epoch 0.
COMMIT_KEY = b"\x00\x00\x00\x01"
COMMIT_VALUE = b"\x00\x00\x00\x00\x00\x00"


def _control_batch(producer_id: int = 7, transactional: bool = True) -> bytes:
    return build_batch([(COMMIT_KEY, COMMIT_VALUE, 1000, [])], producer_id=producer_id,
                       producer_epoch=0, is_transactional=transactional, is_control=True)


@pytest.fixture
def raw(pykfk_broker_inprocess):
    client = RawClient(pykfk_broker_inprocess.host, pykfk_broker_inprocess.port)
    yield client
    client.close()


@pytest.mark.parametrize("version", [3, 7, 9])
def test_control_batch_from_a_client_is_invalid_record(raw, version):
    create_topic(raw, "markers", 1)
    assert produce(raw, "markers", 0, _control_batch(transactional=False),
                   version=version).error_code == ErrorCode.INVALID_RECORD
    assert (produce(raw, "markers", 0, _control_batch(), version=version).error_code
            == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    assert list_offset(raw, "markers", 0, -1).offset == 0


def test_control_batch_among_v2_batches_is_refused_whole(raw):
    create_topic(raw, "markers2", 1)
    data = build_batch([(b"k", b"v", 1000, [])]) + _control_batch(producer_id=-1)
    assert produce(raw, "markers2", 0, data, version=2).error_code == ErrorCode.INVALID_RECORD
    assert list_offset(raw, "markers2", 0, -1).offset == 0
    # An ordinary batch still goes in at offset 0.
    assert produce(raw, "markers2", 0, build_batch([(b"k", b"v", 1000, [])]), version=2).base_offset == 0
