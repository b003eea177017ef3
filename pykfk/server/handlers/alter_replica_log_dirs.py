"""AlterReplicaLogDirs (key 34): move partitions between the log dirs of this broker
(pykfk.server.log_dir_moves). ALTER on the cluster is needed (else
CLUSTER_AUTHORIZATION_FAILED for every partition). Per partition: LOG_DIR_NOT_FOUND
for a path that is not one of the broker's log dirs, KAFKA_STORAGE_ERROR for an offline
one or a log in an offline dir, UNKNOWN_TOPIC_OR_PARTITION, REPLICA_NOT_AVAILABLE for a
partition without a replica here; NONE once the move has started (it goes on in the
background, DescribeLogDirs shows it)."""

from __future__ import annotations

from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security.acl import Operation
from pykfk.server import log_dir_moves
from pykfk.server.dispatch import RequestContext

API_KEY = 34
VERSIONS = (1, 2)


async def handle(ctx: RequestContext, request: typed.AlterReplicaLogDirsRequest) -> typed.AlterReplicaLogDirsResponse:
    allowed = ctx.allowed_on_cluster(Operation.ALTER)
    by_topic: dict[str, list[typed.AlterReplicaLogDirsResponseAlterReplicaLogDirPartitionResult]] = {}
    for target in request.dirs:
        for topic in target.topics:
            for partition in topic.partitions:
                code = (log_dir_moves.start_move(ctx.broker, topic.name, partition, target.path) if allowed
                        else ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
                by_topic.setdefault(topic.name, []).append({"partition_index": partition, "error_code": code})
    return {"throttle_time_ms": 0,
            "results": [{"topic_name": name, "partitions": parts} for name, parts in by_topic.items()]}
