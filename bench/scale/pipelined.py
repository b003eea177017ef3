"""python -m bench.scale.pipelined [--partitions 1000] [--requests 10000] [--batches 12] [--runs 3]

Many Produce requests pipelined on one connection, as librdkafka sends them to a topic of
thousands of partitions (one-record batches of 100 B, about a dozen partitions a request,
acks=all, a thousand or more in flight): one thread sends them all while the main thread
reads the answers. Prints, for each run, how many were answered and in what time; when
no answer comes for ``--timeout`` seconds it prints the connection's queues from ``ss``
(a broker that stopped reading shows bytes waiting in its receive queue while its loop
is idle) and exits 1.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from bench.scale.probes import create_topic
from pykfk._reference.records import build_batch
from pykfk.testing import BrokerProcess, RawClient

PRODUCE = 0


def run_once(partitions: int, requests: int, batches: int, timeout: float, data_dir: str | None) -> bool:
    workdir = tempfile.mkdtemp(prefix="pykfk-pipelined-", dir=data_dir)
    broker = BrokerProcess(os.path.join(workdir, "data"), {"num.partitions": 1})
    broker.start()
    try:
        raw = RawClient(broker.host, broker.port, timeout=timeout)
        _seconds, error = create_topic(raw, "t", partitions)
        if error:
            raise RuntimeError(f"CreateTopics failed with error code {error}")
        batch = build_batch([(b"k", b"x" * 100, None, [])])
        bodies = [{"transactional_id": None, "acks": -1, "timeout_ms": 30_000,
                   "topic_data": [{"name": "t", "partition_data": [
                       {"index": (i * batches + j) % partitions, "records": batch} for j in range(batches)]}]}
                  for i in range(requests)]
        send_error: list[BaseException] = []

        def send_all() -> None:
            try:
                for body in bodies:
                    raw.send(PRODUCE, 9, body)
            except OSError as exc:
                send_error.append(exc)

        start = time.perf_counter()
        threading.Thread(target=send_all, daemon=True).start()
        answered = 0
        try:
            for _ in range(requests):
                raw.recv_frame()
                answered += 1
        except OSError:
            pass
        seconds = time.perf_counter() - start
        print(f"{answered:,} of {requests:,} Produce requests answered in {seconds:.2f} s", flush=True)
        if answered < requests:
            queues = subprocess.run(["ss", "-tn"], capture_output=True, text=True, check=False).stdout
            print(f"  no answer for {timeout:.0f} s; the connection's queues (Recv-Q Send-Q):")
            for line in queues.splitlines():
                if f":{broker.port} " in line:
                    print("  " + " ".join(line.split()))
        raw.close()
        return answered == requests
    finally:
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale.pipelined", description=__doc__)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--batches", type=int, default=12, help="partitions (one batch each) a request")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--data-dir", default=None, help="parent of the broker's data dir (default: a temp dir)")
    args = parser.parse_args(argv)
    results = [run_once(args.partitions, args.requests, args.batches, args.timeout, args.data_dir)
               for _ in range(args.runs)]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
