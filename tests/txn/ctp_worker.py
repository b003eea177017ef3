"""A consume-transform-produce worker with confluent-kafka, run as a process by
``test_exactly_once.py``: reads topic "in" (read_committed, partitions assigned, offsets
in group "ctp"), writes each value + b"!" to the same partition of "out" and commits the
input offsets in the same transaction. Exits 0 once the committed offsets reach the end
offsets given on the command line; after each commit it prints how many input records
its group has committed so far (the test kills it at random points of that count).

    python -m tests.txn.ctp_worker BOOTSTRAP TRANSACTIONAL_ID END_OFFSET...
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

BATCH = 200
TIMEOUT_S = 60


def main(bootstrap: str, transactional_id: str, ends: list[int]) -> int:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5})
    producer.init_transactions(TIMEOUT_S)  # fences and aborts what a killed predecessor left open
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ctp", "isolation.level": "read_committed",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    partitions = [TopicPartition("in", p) for p in range(len(ends))]
    committed = consumer.committed(partitions, timeout=TIMEOUT_S)
    consumer.assign([TopicPartition("in", tp.partition, tp.offset) for tp in committed])
    positions = {tp.partition: max(tp.offset, 0) for tp in committed}
    idle_deadline = time.monotonic() + TIMEOUT_S
    while any(positions[p] < end for p, end in enumerate(ends)):
        messages = consumer.consume(BATCH, 0.5)
        messages = [m for m in messages if m.error() is None]
        if not messages:
            if time.monotonic() > idle_deadline:
                print(f"no progress: positions {positions}, ends {ends}", file=sys.stderr)
                return 1
            continue
        idle_deadline = time.monotonic() + TIMEOUT_S
        producer.begin_transaction()
        for message in messages:
            producer.produce("out", message.value() + b"!", partition=message.partition())
            positions[message.partition()] = message.offset() + 1
        producer.send_offsets_to_transaction([TopicPartition("in", p, o) for p, o in positions.items()],
                                             consumer.consumer_group_metadata(), TIMEOUT_S)
        try:
            producer.commit_transaction(TIMEOUT_S)
        except KafkaException as exc:
            print(f"commit failed: {exc}", file=sys.stderr)
            return 2
        print(sum(positions.values()), flush=True)
    consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], [int(a) for a in sys.argv[3:]]))
