"""ApiVersions (key 18): the API ranges of the dispatch registry (KIP-35, KIP-511) and,
from v3, the supported and finalized features (KIP-584, pykfk.server.features).

An unsupported version never reaches this handler: the dispatcher answers it with the
v0-layout UNSUPPORTED_VERSION fallback.
"""

from __future__ import annotations

from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.server import features
from pykfk.server.dispatch import RequestContext

API_KEY = 18
VERSIONS = (0, 4)


def _share_groups_served(ctx: RequestContext) -> bool:
    enabled = bool(ctx.broker.config["group.share.enable"])
    return enabled and ctx.registry.get(features.SHARE_GROUP_HEARTBEAT_KEY) is not None


async def handle(ctx: RequestContext, request: typed.ApiVersionsRequest) -> typed.ApiVersionsResponse:
    response: typed.ApiVersionsResponse = {
        "error_code": ErrorCode.NONE, "api_keys": ctx.registry.api_versions(), "throttle_time_ms": 0}
    if ctx.api_version >= 3:
        ctx.session.client_software = (request.client_software_name, request.client_software_version)
        produce = ctx.registry.get(features.PRODUCE_KEY)
        served = features.served_features(_share_groups_served(ctx), -1 if produce is None else produce.max_version)
        response["supported_features"] = features.supported_keys(served, ctx.api_version)
        response["finalized_features"] = features.finalized_keys(served)
        response["finalized_features_epoch"] = features.FINALIZED_FEATURES_EPOCH
    return response
