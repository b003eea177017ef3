"""DescribeLogDirs (key 35): each log directory of this broker with the size of every
partition in it (all partitions, or those asked for), its lag behind the high watermark,
and (v4) the directory's file system size and free space. DESCRIBE on the cluster is
needed: without it the answer is CLUSTER_AUTHORIZATION_FAILED (v3+) or empty. An
offline directory (an I/O error took it offline) answers KAFKA_STORAGE_ERROR and no
partitions, as Kafka's does; a full one is online (its partitions are read). A partition moving to another dir
(AlterReplicaLogDirs) is also listed there as the future replica (is_future_key).
"""

from __future__ import annotations

import os
from collections import defaultdict

from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security.acl import Operation
from pykfk.server import log_dir_moves
from pykfk.server.dispatch import RequestContext

API_KEY = 35
VERSIONS = (0, 4)


def _wanted(request: typed.DescribeLogDirsRequest) -> set[tuple[str, int]] | None:
    if request.topics is None:
        return None
    return {(t.topic, p) for t in request.topics for p in t.partitions}


def _space(log_dir: str) -> tuple[int, int]:
    try:
        stats = os.statvfs(log_dir)
    except OSError:
        return -1, -1
    return stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize


def handle(ctx: RequestContext, request: typed.DescribeLogDirsRequest) -> typed.DescribeLogDirsResponse:
    if not ctx.allowed_on_cluster(Operation.DESCRIBE):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "results": []}
    log_manager = ctx.broker.replica_manager.log_manager
    wanted = _wanted(request)
    by_dir: dict[str, dict[str, list[typed.DescribeLogDirsPartition]]] = {d: defaultdict(list) for d in log_manager.log_dirs}
    for (topic, partition), plog in sorted(log_manager.logs().items()):
        if wanted is not None and (topic, partition) not in wanted:
            continue
        by_dir.setdefault(os.path.dirname(plog.dir), defaultdict(list))[topic].append({
            "partition_index": partition, "partition_size": plog.size_bytes,
            "offset_lag": max(0, plog.high_watermark - plog.log_end_offset), "is_future_key": False})
    for (topic, partition), move in sorted(log_dir_moves.moves_of(ctx.broker).items()):
        plog = log_manager.get_log(topic, partition)
        if plog is None or (wanted is not None and (topic, partition) not in wanted):
            continue
        # The future replica, as Kafka shows it: in its target dir, lagging the log end.
        by_dir.setdefault(move.log_dir, defaultdict(list))[topic].append({
            "partition_index": partition, "partition_size": log_dir_moves.future_size(move),
            "offset_lag": max(0, plog.log_end_offset - move.copied_offset), "is_future_key": True})
    results: list[typed.DescribeLogDirsResult] = []
    offline = set(log_manager.offline_dirs())
    for log_dir, topics in by_dir.items():
        if log_dir in offline:
            results.append({"error_code": ErrorCode.KAFKA_STORAGE_ERROR, "log_dir": log_dir, "total_bytes": -1,
                            "usable_bytes": -1, "topics": []})
            continue
        total, usable = _space(log_dir)
        results.append({"error_code": ErrorCode.NONE, "log_dir": log_dir, "total_bytes": total,
                         "usable_bytes": usable,
                         "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results": results}
