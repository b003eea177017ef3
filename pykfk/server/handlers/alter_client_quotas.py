"""AlterClientQuotas (key 49): set or remove quota settings of user / client-id entities,
each entry all or nothing (INVALID_REQUEST for an unknown entity type or key, a
repeated type, a value not above zero). Needs ALTER_CONFIGS on the cluster."""

from __future__ import annotations

import math

from pykfk.cluster.metadata import MetadataWriteError
from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security.acl import Operation
from pykfk.security.quotas import ENTITY_TYPES, QUOTA_KEYS, Entity, entity_of
from pykfk.server.dispatch import RequestContext

API_KEY = 49
VERSIONS = (0, 1)


def _check(entry: typed.AlterClientQuotasRequestEntryData) -> str | None:
    types = [e.entity_type for e in entry.entity]
    if not types or any(t not in ENTITY_TYPES for t in types):
        return f"Invalid quota entity {types}: entity types are {', '.join(ENTITY_TYPES)}"
    if len(set(types)) != len(types):
        return "Duplicate entity type"
    for op in entry.ops:
        if op.key not in QUOTA_KEYS:
            return f"Invalid configuration key {op.key}"
        if not op.remove and not (op.value > 0 and math.isfinite(op.value)):
            return f"Quota {op.key} must be above zero, not {op.value}"
    return None


async def handle(ctx: RequestContext, request: typed.AlterClientQuotasRequest) -> typed.AlterClientQuotasResponse:
    results: list[typed.AlterClientQuotasResponseEntryData] = []
    allowed = ctx.allowed_on_cluster(Operation.ALTER_CONFIGS)
    for entry in request.entries:
        described: list[typed.AlterClientQuotasResponseEntityData] = [{"entity_type": e.entity_type, "entity_name": e.entity_name} for e in entry.entity]
        if not allowed:
            results.append({"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "entity": described,
                            "error_message": "Authorization failed."})
            continue
        problem = _check(entry)
        if problem is not None:
            results.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": problem, "entity": described})
            continue
        entity: Entity = entity_of({e.entity_type: e.entity_name for e in entry.entity})
        if not request.validate_only:
            try:
                await ctx.broker.metadata.alter_client_quotas(
                    entity, {op.key: op.value for op in entry.ops if not op.remove},
                    [op.key for op in entry.ops if op.remove])
            except MetadataWriteError as exc:
                results.append({"error_code": exc.code, "error_message": exc.message, "entity": described})
                continue
        results.append({"error_code": ErrorCode.NONE, "entity": described})
    return {"entries": results}
