"""WriteTxnMarkers (key 27): a transaction coordinator on another broker asks this one,
the partitions' leader, to end a transaction with COMMIT or ABORT markers
(``pykfk.txn.markers``). Needs ClusterAction on the cluster, as in Kafka. Each partition
is answered once its marker is replicated to the in-sync replicas.
"""

from __future__ import annotations

import asyncio

from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security.acl import Operation
from pykfk.server.dispatch import RequestContext
from pykfk.txn.markers import write_local_marker

API_KEY = 27
VERSIONS = (0, 1)


async def handle(ctx: RequestContext, request: typed.WriteTxnMarkersRequest) -> typed.WriteTxnMarkersResponse:
    allowed = ctx.allowed_on_cluster(Operation.CLUSTER_ACTION)
    timeout_ms = ctx.broker.config["offsets.commit.timeout.ms"]
    results: list[typed.WriteTxnMarkersResponseWritableTxnMarkerResult] = []
    for marker in request.markers:
        targets = [(t.name, p) for t in marker.topics for p in t.partition_indexes]
        if allowed:
            codes = await asyncio.gather(*(write_local_marker(
                ctx.broker.replica_manager, ctx.broker.group_coordinator, topic, partition, marker.producer_id,
                marker.producer_epoch, marker.transaction_result, marker.coordinator_epoch, timeout_ms)
                for topic, partition in targets))
        else:
            codes = [int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)] * len(targets)
        by_topic: dict[str, list[typed.WriteTxnMarkersResponseWritableTxnMarkerPartitionResult]] = {}
        for (topic, partition), code in zip(targets, codes, strict=True):
            by_topic.setdefault(topic, []).append({"partition_index": partition, "error_code": code})
        results.append({"producer_id": marker.producer_id,
                        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})
    return {"markers": results}
