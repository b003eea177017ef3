"""ElectLeaders (key 43): the controller elects the preferred replica (election type 0),
or a live replica of a partition without a live leader (1, unclean), for the given
partitions or every one (null list). ALTER on the cluster is needed; brokers other than
the controller answer NOT_CONTROLLER, and admin clients send this to the controller
named in Metadata (Kafka's ZooKeeper-mode brokers answer the same way)."""

from __future__ import annotations

from collections.abc import Mapping

from pykfk.cluster.controller import PREFERRED, ElectionOutcome
from pykfk.errors import ErrorCode, KafkaError
from pykfk.protocol import typed
from pykfk.security.acl import Operation
from pykfk.server.dispatch import RequestContext

API_KEY = 43
VERSIONS = (0, 2)


def _requested(request: typed.ElectLeadersRequest) -> list[tuple[str, int]] | None:
    if request.topic_partitions is None:
        return None
    return list(dict.fromkeys((t.topic, p) for t in request.topic_partitions for p in t.partitions))


def _body(outcomes: Mapping[tuple[str, int], ElectionOutcome], error_code: ErrorCode = ErrorCode.NONE
          ) -> typed.ElectLeadersResponse:
    by_topic: dict[str, list[typed.ElectLeadersResponsePartitionResult]] = {}
    for (topic, partition), (code, message) in outcomes.items():
        by_topic.setdefault(topic, []).append(
            {"partition_id": partition, "error_code": code, "error_message": message})
    return {"throttle_time_ms": 0, "error_code": error_code,
            "replica_election_results": [{"topic": t, "partition_result": r} for t, r in by_topic.items()]}


def _failed(requested: list[tuple[str, int]] | None, code: ErrorCode, message: str) -> typed.ElectLeadersResponse:
    """Every requested partition gets ``code`` (an empty list when all were asked for)."""
    return _body({key: (code, message) for key in requested or ()}, code)


async def handle(ctx: RequestContext, request: typed.ElectLeadersRequest) -> typed.ElectLeadersResponse:
    requested = _requested(request)
    if not ctx.allowed_on_cluster(Operation.ALTER):
        return _failed(requested, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Authorization failed.")
    election_type = request.election_type if ctx.api_version >= 1 else PREFERRED
    try:
        outcomes = await ctx.broker.cluster.elect_leaders(election_type, requested, request.timeout_ms / 1000)
    except KafkaError as exc:
        return _failed(requested, exc.code, exc.message or exc.code.name)
    return _body(outcomes)
