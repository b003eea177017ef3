"""PushTelemetry (key 72, KIP-714): a client's metrics, kept for the Prometheus endpoint.
Errors as Kafka's ClientMetricsManager: the zero instance id or a push after the
terminating one INVALID_REQUEST, a subscription id that is not the instance's current
one (an unknown instance has none yet) UNKNOWN_SUBSCRIPTION_ID, a push sooner than
one push interval after the last request (a GetTelemetrySubscriptions excepted)
THROTTLING_QUOTA_EXCEEDED, unless it is the terminating one, a compression type not
offered UNSUPPORTED_COMPRESSION_TYPE, more than telemetry_max_bytes TELEMETRY_TOO_LARGE,
a payload that does not decompress or decode INVALID_RECORD."""

from __future__ import annotations

from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.server import telemetry
from pykfk.server.dispatch import RequestContext
from pykfk.server.handlers.get_telemetry_subscriptions import ZERO_UUID, client_attributes

API_KEY = 72
VERSIONS = (0, 0)


def _answer(code: int) -> typed.PushTelemetryResponse:
    return {"throttle_time_ms": 0, "error_code": code}


async def handle(ctx: RequestContext, request: typed.PushTelemetryRequest) -> typed.PushTelemetryResponse:
    if request.client_instance_id == ZERO_UUID:
        return _answer(ErrorCode.INVALID_REQUEST)
    state = telemetry.broker_telemetry(ctx.broker)
    known = state.instances.get(request.client_instance_id)
    instance = known or state.instance(request.client_instance_id,
                                       client_attributes(ctx, request.client_instance_id))
    if instance.terminating:
        return _answer(ErrorCode.INVALID_REQUEST)
    if known is None or request.subscription_id != instance.subscription_id:
        return _answer(ErrorCode.UNKNOWN_SUBSCRIPTION_ID)
    if not instance.may_push(state.clock.monotonic()) and not request.terminating:
        return _answer(ErrorCode.THROTTLING_QUOTA_EXCEEDED)
    if request.compression_type != 0 and request.compression_type not in telemetry.ACCEPTED_COMPRESSION:
        return _answer(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)
    if len(request.metrics) > telemetry.TELEMETRY_MAX_BYTES:
        return _answer(ErrorCode.TELEMETRY_TOO_LARGE)
    instance.terminating = request.terminating
    if request.metrics:
        try:
            payload = telemetry.decompress(request.compression_type, bytes(request.metrics),
                                           4 * telemetry.TELEMETRY_MAX_BYTES)
            state.record(instance, payload)
        except ValueError:  # MalformedMetrics included
            return _answer(ErrorCode.INVALID_RECORD)
    return _answer(ErrorCode.NONE)
