"""Topic creation and fast producing for the Spark tests: batches built by the compiled
core and sent as raw Produce requests, several in flight, so a million records take
about a second instead of a minute through a per-record client."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from pykfk._core.records import build_batch
from pykfk.client.connection import BrokerConnection

PRODUCE = 0
CREATE_TOPICS = 19

Record = tuple  # (key, value, timestamp_ms, headers)


def connect(bootstrap: str) -> BrokerConnection:
    host, _, port = bootstrap.rpartition(":")
    return BrokerConnection(host, int(port)).connect()


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    with connect(bootstrap) as conn:
        body = {
            "topics": [
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
            ],
            "timeout_ms": 10000,
        }
        result = conn.request(CREATE_TOPICS, body).topics[0]
        assert result.error_code == 0, result


def produce(
    bootstrap: str,
    topic: str,
    records_for: Callable[[int, int, int], Sequence[Record]],
    partitions: Iterable[int],
    count: int,
    *,
    first_offset: int = 0,
    batch_records: int = 5000,
    in_flight: int = 4,
) -> None:
    """Append ``count`` records to each of ``partitions``; ``records_for(partition,
    first, n)`` returns the records for offsets first..first+n-1 of that partition
    (offsets are assigned by the broker, so ``first_offset`` must be the log end)."""
    parts = list(partitions)
    with connect(bootstrap) as conn:
        pending = []
        for start in range(first_offset, first_offset + count, batch_records):
            n = min(batch_records, first_offset + count - start)
            data = [
                {"index": p, "records": build_batch(records_for(p, start, n), base_offset=start)}
                for p in parts
            ]
            body = {
                "transactional_id": None,
                "acks": 1,
                "timeout_ms": 30000,
                "topic_data": [{"name": topic, "partition_data": data}],
            }
            pending.append((conn.send(PRODUCE, body, version=7), start))
            while len(pending) >= in_flight:
                entry, base = pending.pop(0)
                _check(conn.receive(entry), base)
        for entry, base in pending:
            _check(conn.receive(entry), base)


def _check(response: object, base_offset: int) -> None:
    for topic in response.responses:  # type: ignore[attr-defined]
        for part in topic.partition_responses:
            assert part.error_code == 0, (topic.name, part)
            assert part.base_offset == base_offset, (
                topic.name,
                part,
                "log end was not first_offset",
            )
