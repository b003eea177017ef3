"""python -m bench.scale.metadata [--partitions 10000] [--rounds 3] [--data-dir /dev/shm]

The first Metadata of a whole topic after its creation, the one request that encodes all
its partitions (later ones reuse the encoding until the topic changes). Each round creates
a topic of ``--partitions`` partitions on one broker, times the first Metadata of it at
v5, then the first at v9 and v12 (each version is encoded on its first request), then a
warm v5; a new broker each round. Prints the median over the rounds of each.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

from bench.scale.probes import METADATA, create_topic
from pykfk.testing import BrokerProcess, RawClient

TOPIC = "metadata"
VERSIONS = (5, 9, 12)


def metadata_ms(raw: RawClient, topic: str, version: int) -> float:
    """One Metadata request for ``topic`` to the last byte of its response."""
    body = {"topics": [{"name": topic}], "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False}
    start = time.perf_counter()
    raw.send(METADATA, version, body)
    raw.recv_frame()
    return (time.perf_counter() - start) * 1000


def run(partitions: int, rounds: int, workdir: str) -> dict[str, list[float]]:
    """A fresh broker each round (a deleted topic's files close only later)."""
    times: dict[str, list[float]] = {}
    for i in range(rounds):
        broker = BrokerProcess(os.path.join(workdir, f"data-{i}"), {"num.partitions": 1})
        broker.start()
        try:
            raw = RawClient(broker.host, broker.port, timeout=300)
            _seconds, error = create_topic(raw, TOPIC, partitions)
            if error:
                raise RuntimeError(f"CreateTopics failed with error code {error}")
            time.sleep(0.2)  # let the creation's own work settle
            for version in VERSIONS:
                times.setdefault(f"first v{version}", []).append(metadata_ms(raw, TOPIC, version))
            warm = [metadata_ms(raw, TOPIC, 5) for _ in range(5)]
            times.setdefault("warm v5", []).append(statistics.median(warm))
            raw.close()
        finally:
            broker.stop()
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale.metadata", description=__doc__)
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--data-dir", default=None, help="parent of the broker's data dir (default: a temp dir)")
    args = parser.parse_args(argv)
    workdir = tempfile.mkdtemp(prefix="pykfk-scale-metadata-", dir=args.data_dir)
    try:
        times = run(args.partitions, args.rounds, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"Metadata of a topic of {args.partitions:,} partitions, median of {args.rounds} rounds:")
    for name, values in times.items():
        shown = ", ".join(f"{v:.2f}" for v in values)
        print(f"  {name:<9} {statistics.median(values):8.2f} ms   ({shown})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
