"""SimpleConsumer: one request per call, offsets as the seeds' API gives them."""

from __future__ import annotations

import pytest

from pykfk.consumer import EARLIEST, LATEST, FetchRequest, SimpleConsumer
from pykfk.errors import ErrorCode, KafkaError
from pykfk.producer import Producer


@pytest.fixture
def filled(broker, topic):
    """20 records in partition 0 (batches of 5) and 3 in partition 1."""
    with Producer(broker.bootstrap, producer_type="sync") as producer:
        for start in range(0, 20, 5):
            producer.send_many(topic, [b"p0-%d" % i for i in range(start, start + 5)], partition=0)
        producer.send_many(topic, [b"p1-%d" % i for i in range(3)], key=b"k", partition=1)
    return topic


def test_fetch_skips_records_below_the_requested_offset(broker, filled):
    with SimpleConsumer(broker.bootstrap) as consumer:
        ms = consumer.fetch(filled, 0, 7)  # inside the second batch (5..9)
        assert [m.offset for m in ms] == list(range(7, 20))
        assert [m.value for m in ms][:2] == [b"p0-7", b"p0-8"]
        assert ms.next_offset == 20 and ms.high_watermark == 20
        assert ms[0].topic == filled and ms[0].partition == 0 and ms[-1].offset == 19
        assert list(consumer.fetch(filled, 0, 20)) == []


def test_fetch_respects_max_bytes_with_whole_batches(broker, filled):
    with SimpleConsumer(broker.bootstrap) as consumer:
        ms = consumer.fetch(filled, 0, 0, max_bytes=10)  # less than one batch: still one batch
        assert [m.offset for m in ms] == [0, 1, 2, 3, 4]
        assert ms.next_offset == 5
        assert [m.offset for m in consumer.fetch(filled, 0, ms.next_offset, 10)] == [5, 6, 7, 8, 9]


def test_multifetch_keeps_request_order_and_errors_per_partition(broker, filled):
    with SimpleConsumer(broker.bootstrap) as consumer:
        sets = consumer.multifetch([FetchRequest(filled, 1, 1), (filled, 0, 18), (filled, 2, 500)])
    assert [(m.partition, m.offset, m.key) for m in sets[0]] == [(1, 1, b"k"), (1, 2, b"k")]
    assert [m.offset for m in sets[1]] == [18, 19]
    assert sets[2].error == ErrorCode.OFFSET_OUT_OF_RANGE
    with pytest.raises(KafkaError):
        list(sets[2])
    with pytest.raises(ValueError):
        consumer.multifetch([(filled, 0, 0), (filled, 0, 5)])  # one partition once per request


def test_fetch_out_of_range_raises(broker, filled):
    with SimpleConsumer(broker.bootstrap) as consumer, pytest.raises(KafkaError) as info:
        consumer.fetch(filled, 0, 21)
    assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_get_offsets_before(broker, filled):
    host, port = broker.bootstrap.split(":")
    with SimpleConsumer(host, int(port)) as consumer:
        assert consumer.get_offsets_before(filled, 0, LATEST, 1) == [20]
        assert consumer.get_offsets_before(filled, 0, EARLIEST, 1) == [0]
        assert consumer.get_offsets_before(filled, 1, SimpleConsumer.LATEST) == [3]
        several = consumer.get_offsets_before(filled, 0, LATEST, 10)
        assert several and several[0] == 20 and all(o <= 20 for o in several)
        with pytest.raises(KafkaError):
            consumer.get_offsets_before(filled, 9, LATEST)
