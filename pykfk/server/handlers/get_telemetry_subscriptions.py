"""GetTelemetrySubscriptions (key 71, KIP-714): what the client should push. A zero
client instance id gets a new one; the instance's subscription is made from the
client-metrics subscriptions its attributes match (none: no metrics requested)."""

from __future__ import annotations

import uuid

from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.server import telemetry
from pykfk.server.dispatch import RequestContext

API_KEY = 71
VERSIONS = (0, 0)

ZERO_UUID = uuid.UUID(int=0)


def client_attributes(ctx: RequestContext, instance_id: uuid.UUID) -> dict[str, str]:
    """The attributes ``match`` patterns test, from the connection."""
    name, version = ctx.session.client_software
    host, _sep, port = ctx.client_host.rpartition(":")
    return {"client_instance_id": str(instance_id), "client_id": ctx.client_id or "",
            "client_software_name": name, "client_software_version": version,
            "client_source_address": host or ctx.client_host, "client_source_port": port}


async def handle(ctx: RequestContext, request: typed.GetTelemetrySubscriptionsRequest
                 ) -> typed.GetTelemetrySubscriptionsResponse:
    state = telemetry.broker_telemetry(ctx.broker)
    instance_id = request.client_instance_id
    if instance_id == ZERO_UUID:
        instance_id = uuid.uuid4()
    instance = state.instance(instance_id, client_attributes(ctx, instance_id))
    instance.last_get = state.clock.monotonic()
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "client_instance_id": instance_id,
            "subscription_id": instance.subscription_id,
            "accepted_compression_types": list(telemetry.ACCEPTED_COMPRESSION),
            "push_interval_ms": instance.interval_ms, "telemetry_max_bytes": telemetry.TELEMETRY_MAX_BYTES,
            "delta_temporality": True, "requested_metrics": list(instance.metrics)}
