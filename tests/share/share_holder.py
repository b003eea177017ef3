"""A share consumer that acquires records, prints their offsets on one line and then
holds them without acknowledging until it is killed (tests/share)."""

import sys
import time

from confluent_kafka import ShareConsumer


def main() -> None:
    bootstrap, group, topic = sys.argv[1:4]
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "max.poll.records": 5,
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([topic])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        messages = consumer.poll(0.5) or []
        if messages:
            print(" ".join(str(m.offset()) for m in messages), flush=True)
            break
    else:
        print(flush=True)
    time.sleep(60)  # holding; the test kills this process


if __name__ == "__main__":
    main()
