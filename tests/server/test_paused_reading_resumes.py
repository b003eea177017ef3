"""A connection whose reading paused for a full queue (``queued.max.requests`` requests
in flight) reads again once answers leave, however they leave: sent at once, or at the
end of a loop turn with the others of that turn. A client pipelining more Produce
requests than the queue holds, as librdkafka does on a topic of thousands of partitions,
gets every answer."""

from __future__ import annotations

import threading

from pykfk._core.records import build_batch
from pykfk.testing import BrokerProcess, RawClient

from .test_handlers import PRODUCE, create_topic

PARTITIONS = 200
REQUESTS = 3000
BATCHES = 12  # partitions a request, one one-record batch each


def test_more_pipelined_produce_requests_than_the_queue_holds_are_all_answered(tmp_path):
    broker = BrokerProcess(str(tmp_path / "data"), {"queued.max.requests": 50})
    broker.start()
    try:
        raw = RawClient(broker.host, broker.port, timeout=15)
        assert create_topic(raw, "pipelined", partitions=PARTITIONS)[0] == 0
        batch = build_batch([(b"k", b"x" * 100, 1000, [])])
        bodies = [{"transactional_id": None, "acks": -1, "timeout_ms": 30_000,
                   "topic_data": [{"name": "pipelined", "partition_data": [
                       {"index": (i * BATCHES + j) % PARTITIONS, "records": batch} for j in range(BATCHES)]}]}
                  for i in range(REQUESTS)]
        failures: list[BaseException] = []

        def send_all() -> None:
            try:
                for body in bodies:
                    raw.send(PRODUCE, 9, body)
            except OSError as exc:
                failures.append(exc)

        sender = threading.Thread(target=send_all, daemon=True)
        sender.start()
        errors = set()
        for i in range(REQUESTS):  # each recv waits at most 15 s: a stalled connection fails here
            _correlation_id, answer = raw.recv(PRODUCE, 9)
            errors.update(p.error_code for t in answer.responses for p in t.partition_responses)
        sender.join(15)
        assert not failures
        assert errors == {0}
        listed = raw.call(2, 1, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "pipelined", "partitions": [{"partition_index": p, "timestamp": -1} for p in range(PARTITIONS)]}]})
        assert sum(p.offset for p in listed.topics[0].partitions) == REQUESTS * BATCHES
        raw.close()
    finally:
        broker.stop()
