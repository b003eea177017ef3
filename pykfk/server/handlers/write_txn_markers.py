"""WriteTxnMarkers (key 27): a transaction coordinator on another broker asks this one,
the partitions' leader, to end a transaction with COMMIT or ABORT markers
(``pykfk.txn.markers``). Needs ClusterAction on the cluster, as in Kafka. Each partition
is answered once its marker is replicated to the in-sync replicas; all markers of a
request are appended before the first wait.
"""

from __future__ import annotations

import asyncio

from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security.acl import Operation
from pykfk.server.dispatch import RequestContext
from pykfk.txn.markers import write_local_markers

API_KEY = 27
VERSIONS = (0, 1)


async def handle(ctx: RequestContext, request: typed.WriteTxnMarkersRequest) -> typed.WriteTxnMarkersResponse:
    allowed = ctx.allowed_on_cluster(Operation.CLUSTER_ACTION)
    timeout_ms = ctx.broker.config["offsets.commit.timeout.ms"]
    targets = [[(t.name, p) for t in marker.topics for p in t.partition_indexes] for marker in request.markers]
    if allowed:
        # Every marker of the request is appended before any waits for its replicas, so
        # the transactions and partitions of one request share the waits.
        all_codes = await asyncio.gather(*(write_local_markers(
            ctx.broker.replica_manager, ctx.broker.group_coordinator, marker_targets, marker.producer_id,
            marker.producer_epoch, marker.transaction_result, marker.coordinator_epoch, timeout_ms)
            for marker, marker_targets in zip(request.markers, targets, strict=True)))
    else:
        all_codes = [[int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)] * len(t) for t in targets]
    results: list[typed.WriteTxnMarkersResponseWritableTxnMarkerResult] = []
    for marker, marker_targets, codes in zip(request.markers, targets, all_codes, strict=True):
        by_topic: dict[str, list[typed.WriteTxnMarkersResponseWritableTxnMarkerPartitionResult]] = {}
        for (topic, partition), code in zip(marker_targets, codes, strict=True):
            by_topic.setdefault(topic, []).append({"partition_index": partition, "error_code": code})
        results.append({"producer_id": marker.producer_id,
                        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})
    return {"markers": results}
