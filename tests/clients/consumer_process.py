"""A ConsumerConnector in its own process, for tests that kill a group member with
SIGKILL. Writes every value it takes to a file (flushed) before committing it, so a
test knows exactly what it consumed.

    python consumer_process.py OUT_FILE GROUP TOPIC MODE ADDRESS DELAY_SECONDS
"""

from __future__ import annotations

import sys
import time

from pykfk.consumer import ConsumerConnector


def main() -> None:
    out_path, group, topic, mode, address, delay = sys.argv[1:7]
    options = {
        "coordination": mode,
        "auto_commit_enable": False,
        "auto_offset_reset": "smallest",
        "heartbeat_interval_ms": 200,
        "session_timeout_ms": 2000,
        "zk_session_timeout_ms": 1500,
        "rebalance_backoff_ms": 300,
        "rebalance_max_retries": 20,
    }
    if mode == "broker":
        connector = ConsumerConnector(group, address, **options)
    else:
        connector = ConsumerConnector(group, zk_connect=address, **options)
    (stream,) = connector.create_message_streams({topic: 1})[topic]
    with open(out_path, "a", buffering=1) as out:
        out.write(f"ASSIGNED {connector.assignment()}\n")
        for n, message in enumerate(stream, 1):
            out.write(message.value.decode() + "\n")
            out.flush()
            time.sleep(float(delay))  # slow enough to be killed halfway
            if n % 10 == 0:
                connector.commit_offsets()


if __name__ == "__main__":
    main()
