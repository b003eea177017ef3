"""CreateAcls (key 30): store ACL bindings, one result per binding. Needs ALTER on the
cluster; an invalid binding gets INVALID_REQUEST and is not stored, the others are."""

from __future__ import annotations

from pykfk.cluster.metadata import MetadataWriteError
from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security.acl import AclBinding, AclError, Operation, binding_from_codes
from pykfk.server.dispatch import RequestContext

API_KEY = 30
VERSIONS = (0, 3)


async def handle(ctx: RequestContext, request: typed.CreateAclsRequest) -> typed.CreateAclsResponse:
    creations = request.creations
    if ctx.broker.authorizer is None:
        return {"results": [{"error_code": ErrorCode.SECURITY_DISABLED,
                             "error_message": "No Authorizer is configured on the broker"} for _ in creations]}
    if not ctx.allowed_on_cluster(Operation.ALTER):
        return {"results": [{"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED} for _ in creations]}
    results: list[typed.CreateAclsResponseAclCreationResult] = []
    valid: list[AclBinding] = []
    for c in creations:
        binding = binding_from_codes(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal,
                                     c.host, c.operation, c.permission_type)
        try:
            binding.check()
        except AclError as exc:
            results.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": str(exc)})
            continue
        valid.append(binding)
        results.append({"error_code": ErrorCode.NONE})
    if valid:
        try:
            await ctx.broker.metadata.create_acls(valid)
        except MetadataWriteError as exc:
            failed: typed.CreateAclsResponseAclCreationResult = {"error_code": exc.code, "error_message": exc.message}
            results = [failed if r["error_code"] == ErrorCode.NONE else r for r in results]
    return {"results": results}
