"""DescribeClientQuotas (key 48): the quota settings of the entities a filter matches.
Each component names an entity type and EXACT (a name), DEFAULT or ANY; with ``strict``
an entity must have no other types. Needs DESCRIBE_CONFIGS on the cluster."""

from __future__ import annotations

from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security.acl import Operation
from pykfk.security.quotas import ENTITY_TYPES, Entity
from pykfk.server.dispatch import RequestContext

API_KEY = 48
VERSIONS = (0, 1)
EXACT, DEFAULT, ANY = 0, 1, 2


def _matches(entity: Entity, components: list[typed.DescribeClientQuotasRequestComponentData], strict: bool) -> bool:
    names = dict(entity)
    for c in components:
        if c.entity_type not in names:
            return False
        name = names[c.entity_type]
        if (c.match_type == EXACT and name != c.match) or (c.match_type == DEFAULT and name is not None):
            return False
    return not strict or len(names) == len(components)


def handle(ctx: RequestContext, request: typed.DescribeClientQuotasRequest) -> typed.DescribeClientQuotasResponse:
    if not ctx.allowed_on_cluster(Operation.DESCRIBE_CONFIGS):
        return {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "error_message": "Authorization failed.",
                "entries": None}
    components = list(request.components)
    types = [c.entity_type for c in components]
    for c in components:
        if c.entity_type not in ENTITY_TYPES or c.match_type not in (EXACT, DEFAULT, ANY) or (
                c.match_type == EXACT and c.match is None):
            return {"error_code": ErrorCode.INVALID_REQUEST, "entries": None,
                    "error_message": f"Invalid filter component for entity type {c.entity_type!r}"}
    if len(set(types)) != len(types):
        return {"error_code": ErrorCode.INVALID_REQUEST, "entries": None,
                "error_message": "Duplicate entity type in the filter"}
    entries: list[typed.DescribeClientQuotasResponseEntryData] = [
        {"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
         "values": [{"key": k, "value": v} for k, v in sorted(values.items())]}
        for entity, values in sorted(ctx.broker.metadata.client_quotas().items(), key=lambda e: repr(e[0]))
        if _matches(entity, components, request.strict)
    ]
    return {"error_code": ErrorCode.NONE, "entries": entries}
