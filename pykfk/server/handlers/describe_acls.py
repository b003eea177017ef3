"""DescribeAcls (key 29): the bindings matching a filter, grouped by resource pattern.
Needs DESCRIBE on the cluster; SECURITY_DISABLED without an authorizer (what admin tools
and MirrorMaker 2 expect)."""

from __future__ import annotations

from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security.acl import AclError, Operation, filter_from_codes
from pykfk.server.dispatch import RequestContext

API_KEY = 29
VERSIONS = (0, 3)


def handle(ctx: RequestContext, request: typed.DescribeAclsRequest) -> typed.DescribeAclsResponse:
    if ctx.broker.authorizer is None:
        return {"error_code": ErrorCode.SECURITY_DISABLED, "error_message": "No Authorizer is configured on the broker"}
    if not ctx.allowed_on_cluster(Operation.DESCRIBE):
        return {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
    acl_filter = filter_from_codes(request.resource_type_filter, request.resource_name_filter,
                                   request.pattern_type_filter, request.principal_filter, request.host_filter,
                                   request.operation, request.permission_type)
    try:
        acl_filter.check()
    except AclError as exc:
        return {"error_code": ErrorCode.INVALID_REQUEST, "error_message": str(exc)}
    resources: dict[tuple[int, str, int], list[typed.DescribeAclsResponseAclDescription]] = {}
    for binding in ctx.broker.metadata.acls():
        if acl_filter.matches(binding):
            key = (int(binding.resource_type), binding.name, int(binding.pattern_type))
            resources.setdefault(key, []).append(
                {"principal": binding.principal, "host": binding.host, "operation": int(binding.operation),
                 "permission_type": int(binding.permission)})
    return {"error_code": ErrorCode.NONE, "resources": [
        {"resource_type": rtype, "resource_name": name, "pattern_type": pattern, "acls": acls}
        for (rtype, name, pattern), acls in sorted(resources.items())]}
