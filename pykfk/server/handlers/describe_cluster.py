"""DescribeCluster (key 60): the brokers at their addresses on the client's listener, the
controller and the cluster id. Only broker endpoints exist here (endpoint type 1);
asking for controller endpoints (2) gets UNSUPPORTED_ENDPOINT_TYPE."""

from __future__ import annotations

from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.server.dispatch import RequestContext
from pykfk.server.handlers.metadata import CLUSTER_OPERATIONS

API_KEY = 60
VERSIONS = (0, 2)
BROKER_ENDPOINTS = 1


def handle(ctx: RequestContext, request: typed.DescribeClusterRequest) -> typed.DescribeClusterResponse:
    store = ctx.broker.metadata
    if ctx.api_version >= 1 and request.endpoint_type != BROKER_ENDPOINTS:
        return {"error_code": ErrorCode.UNSUPPORTED_ENDPOINT_TYPE, "cluster_id": store.cluster_id,
                "error_message": "only broker endpoints can be described", "brokers": []}
    brokers: list[typed.DescribeClusterBroker] = []
    for b in store.brokers():
        address = b.address(ctx.session.listener_name)
        if address is not None:
            brokers.append({"broker_id": b.node_id, "host": address[0], "port": address[1], "rack": b.rack})
    body: typed.DescribeClusterResponse = {"error_code": ErrorCode.NONE, "cluster_id": store.cluster_id,
                            "controller_id": store.controller_id(), "brokers": brokers}
    if request.include_cluster_authorized_operations:
        body["cluster_authorized_operations"] = sum(
            1 << int(op) for op in CLUSTER_OPERATIONS if ctx.allowed_on_cluster(op))
    return body
