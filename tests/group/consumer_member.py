"""One consumer group member as its own process (so a test can kill it with SIGKILL):
a confluent-kafka consumer that prints what it does, one line each, with
``time.monotonic()`` (one clock for every process on the machine):

    R <time> <partition> <offset>      a record consumed
    + <time> <partition> ...           partitions assigned
    - <time> <partition> ...           partitions revoked or lost
    C <time> <partition> <offset>      a commit stored (the next offset to read)

usage: consumer_member.py BOOTSTRAP GROUP PROTOCOL TOPIC
"""

from __future__ import annotations

import signal
import sys
import time

from confluent_kafka import Consumer, KafkaException


def say(*fields: object) -> None:
    sys.stdout.write(" ".join(str(f) for f in fields) + "\n")
    sys.stdout.flush()


def main() -> None:
    bootstrap, group, protocol, topic = sys.argv[1:5]
    config = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
              "auto.offset.reset": "earliest", "enable.auto.commit": False}
    if protocol == "classic":
        config.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    consumer = Consumer(config)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    consumer.subscribe([topic],
                       on_assign=lambda c, ps: say("+", time.monotonic(), *(p.partition for p in ps)),
                       on_revoke=lambda c, ps: say("-", time.monotonic(), *(p.partition for p in ps)),
                       on_lost=lambda c, ps: say("-", time.monotonic(), *(p.partition for p in ps)))
    last_commit = time.monotonic()
    while not stopping:
        for message in consumer.consume(100, 0.05):
            if message.error() is None:
                say("R", time.monotonic(), message.partition(), message.offset())
        if time.monotonic() - last_commit > 0.2:
            last_commit = time.monotonic()
            try:
                for tp in consumer.commit(asynchronous=False) or ():
                    if tp.error is None and tp.offset >= 0:
                        say("C", time.monotonic(), tp.partition, tp.offset)
            except KafkaException:
                pass  # nothing to commit, or a rebalance in progress: the next round commits
    consumer.close()


if __name__ == "__main__":
    main()
