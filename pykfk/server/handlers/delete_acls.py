"""DeleteAcls (key 31): remove the bindings each filter matches and list them. Needs
ALTER on the cluster."""

from __future__ import annotations

from pykfk.cluster.metadata import MetadataWriteError
from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security.acl import AclBinding, AclError, Operation, filter_from_codes
from pykfk.server.dispatch import RequestContext

API_KEY = 31
VERSIONS = (0, 3)


def _described(binding: AclBinding) -> typed.DeleteAclsMatchingAcl:
    return {"error_code": ErrorCode.NONE, "resource_type": int(binding.resource_type),
            "resource_name": binding.name, "pattern_type": int(binding.pattern_type),
            "principal": binding.principal, "host": binding.host, "operation": int(binding.operation),
            "permission_type": int(binding.permission)}


async def handle(ctx: RequestContext, request: typed.DeleteAclsRequest) -> typed.DeleteAclsResponse:
    filters = request.filters
    if ctx.broker.authorizer is None:
        return {"filter_results": [{"error_code": ErrorCode.SECURITY_DISABLED,
                                    "error_message": "No Authorizer is configured on the broker"} for _ in filters]}
    if not ctx.allowed_on_cluster(Operation.ALTER):
        return {"filter_results": [{"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED} for _ in filters]}
    existing = ctx.broker.metadata.acls()
    results: list[typed.DeleteAclsFilterResult] = []
    doomed: dict[AclBinding, None] = {}
    for f in filters:
        acl_filter = filter_from_codes(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
                                       f.principal_filter, f.host_filter, f.operation, f.permission_type)
        try:
            acl_filter.check()
        except AclError as exc:
            results.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": str(exc), "matching_acls": []})
            continue
        matching = [b for b in existing if acl_filter.matches(b)]
        doomed.update(dict.fromkeys(matching))
        results.append({"error_code": ErrorCode.NONE, "matching_acls": [_described(b) for b in matching]})
    if doomed:
        try:
            await ctx.broker.metadata.delete_acls(list(doomed))
        except MetadataWriteError as exc:
            failed: typed.DeleteAclsFilterResult = {"error_code": exc.code, "error_message": exc.message, "matching_acls": []}
            results = [failed if r["error_code"] == ErrorCode.NONE else r for r in results]
    return {"filter_results": results}
