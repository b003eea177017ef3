"""aiokafka against a pykfk-broker process: idempotent produce and assigned consume."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition


async def test_produce_and_consume(shared_broker, topic_name):
    producer = AIOKafkaProducer(bootstrap_servers=shared_broker.bootstrap, enable_idempotence=True, compression_type="gzip")
    await producer.start()
    try:
        sent = [
            await producer.send_and_wait(topic_name, b"value-%d" % i, key=b"k%d" % (i % 7), partition=0, headers=[("i", b"%d" % i)])
            for i in range(200)
        ]
    finally:
        await producer.stop()
    assert [m.offset for m in sent] == list(range(200))

    consumer = AIOKafkaConsumer(bootstrap_servers=shared_broker.bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic_name, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        got = []
        async with asyncio.timeout(30):
            while len(got) < 200:
                batches = await consumer.getmany(tp, timeout_ms=500)
                got.extend(batches.get(tp, []))
        assert [(r.offset, r.key, r.value, list(r.headers)) for r in got] == [
            (i, b"k%d" % (i % 7), b"value-%d" % i, [("i", b"%d" % i)]) for i in range(200)
        ]
    finally:
        await consumer.stop()
