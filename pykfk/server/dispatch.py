"""The handler registry: which APIs and versions this broker serves, and request dispatch.

Each module in ``pykfk.server.handlers`` declares ``API_KEY``, ``VERSIONS = (min, max)``
and ``handle(ctx, request)``, where ``ctx`` is the RequestContext (the request header
facts and ``ctx.broker``, the BrokerServices a handler may use) and ``request`` the
decoded Struct, typed as the API's request (``pykfk.protocol.typed``); it returns the
response body (a dict, typed as the API's response), None, or an awaitable giving one
of those (``async def handle`` is the common case; a handler that
can answer at once returns the body itself, so the request costs no task and no event
loop turn). The registry collects them and is the only source of the ranges advertised in
ApiVersions (redpanda's handler table idea). A declared range is clamped to what the
protocol tables can decode, so the broker never advertises a version it cannot read.

A module may also declare fast-path hooks (Produce does, ``pykfk._core.wire``):
``decode_request(view, body_offset, version)`` replaces the generic table decoder (and
must raise ProtocolError where it does), ``encode_response(version, correlation_id,
body) -> list`` the generic encoder (same bytes).

Dispatch rules (Kafka's ``SocketServer``/``KafkaApis``):
- unknown api key, or a version outside the range: close the connection, except for
  ApiVersions, which is answered with UNSUPPORTED_VERSION in a v0 body (KIP-511);
- a request that does not decode: close the connection;
- a handler returning None sends no response (Produce with acks=0).
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import logging
import struct
import time
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping
from types import ModuleType
from typing import Any, cast

from pykfk._core.request_lane import RequestCore
from pykfk._core.wire import decode_request_header
from pykfk.metrics.stats import VERSION_SLOTS, RequestStats
from pykfk.protocol.typed import ApiVersionsResponseApiVersion
from pykfk.protocol.types import FileRegion, Struct
from pykfk.security.acl import CLUSTER_NAME, Operation, ResourceType
from pykfk.security.quotas import REQUEST_PERCENTAGE
from pykfk.server.services import BrokerServices
from pykfk.server.session import SASL_AUTHENTICATE_KEY, SASL_HANDSHAKE_KEY, SASL_LOGIN_KEYS, Session

# A response frame as chunks in wire order: bytes-like objects, and FileRegions whose
# bytes stay in a segment file until sendfile sends them.
Chunks = list[Any]
# A response body as a handler gives it: a dict to encode (typed by the API's response
# TypedDict in pykfk.protocol.typed), None for no response.
Body = Mapping[str, object] | None

NEVER_FLEXIBLE = 1 << 15  # flexible_from of an api without flexible versions (int16 versions)

log = logging.getLogger("pykfk.server")

API_VERSIONS_KEY = 18
_FETCH_KEY = 1

# One module per API, named like pykfk.protocol.messages.
HANDLER_MODULES = (
    "produce",
    "fetch",
    "list_offsets",
    "metadata",
    "offset_commit",
    "offset_fetch",
    "find_coordinator",
    "join_group",
    "heartbeat",
    "leave_group",
    "sync_group",
    "describe_groups",
    "list_groups",
    "sasl_handshake",
    "api_versions",
    "sasl_authenticate",
    "create_topics",
    "delete_topics",
    "delete_records",
    "init_producer_id",
    "add_partitions_to_txn",
    "add_offsets_to_txn",
    "end_txn",
    "write_txn_markers",
    "txn_offset_commit",
    "describe_configs",
    "alter_configs",
    "incremental_alter_configs",
    "create_partitions",
    "create_delegation_token",
    "renew_delegation_token",
    "expire_delegation_token",
    "describe_delegation_token",
    "delete_groups",
    "offset_for_leader_epoch",
    "describe_user_scram_credentials",
    "alter_user_scram_credentials",
    "describe_acls",
    "create_acls",
    "delete_acls",
    "describe_client_quotas",
    "alter_client_quotas",
    "describe_cluster",
    "offset_delete",
    "elect_leaders",
    "alter_partition_reassignments",
    "list_partition_reassignments",
    "alter_replica_log_dirs",
    "describe_log_dirs",
    "consumer_group_heartbeat",
    "get_telemetry_subscriptions",
    "push_telemetry",
    "list_config_resources",
    "share_group_heartbeat",
    "share_group_describe",
    "share_fetch",
    "share_acknowledge",
    "describe_share_group_offsets",
    "alter_share_group_offsets",
    "delete_share_group_offsets",
    "initialize_share_group_state",
    "read_share_group_state",
    "write_share_group_state",
    "delete_share_group_state",
    "consumer_group_describe",
    "describe_topic_partitions",
    "describe_producers",
    "describe_transactions",
    "list_transactions",
)

# Request header v1 fixed part: api_key int16, api_version int16, correlation_id int32.
_FIXED_HEADER = struct.Struct(">hhi")
_FIXED_HEADER_SIZE = _FIXED_HEADER.size
_unpack_fixed_header = _FIXED_HEADER.unpack_from


_SIZE = struct.Struct(">i")


def _check_session(session: Session, api_key: int) -> None:
    """Before a SASL login completes only the login APIs are served; after a session
    expired only a new login is (Kafka closes the connection in both cases)."""
    if not session.authenticated:
        if api_key not in SASL_LOGIN_KEYS:
            raise CloseConnection(f"request of api key {api_key} before SASL authentication completed")
    elif session.expired() and api_key not in (SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY):
        raise CloseConnection("the SASL session expired (connections.max.reauth.ms)")


class CloseConnection(Exception):
    """The request cannot be answered; the connection must be closed (Kafka's way)."""


@dataclasses.dataclass(frozen=True)
class ApiHandler:
    api_key: int
    name: str
    min_version: int
    max_version: int
    # The request and response types are the API's (pykfk.protocol.typed), hence "...".
    handle: Callable[..., Awaitable[Body] | Body]
    decode: Callable[[memoryview, int, int], Struct] | None = None
    encode: Callable[..., Chunks] | None = None
    flexible_from: int = NEVER_FLEXIBLE  # first version with request header v2


class RequestContext(RequestCore):
    """What a handler knows about the request besides its body, and what it may use.

    ``broker`` is the BrokerServices protocol (the only way into the broker),
    ``registry`` the served API ranges (ApiVersions), ``session`` the connection's
    listener and principal. ``pinned`` are the FileRegions
    the response sends from, each holding its segment's descriptor open (pinned); the
    connection releases them once the response is sent or dropped, so a segment deleted
    or closed meanwhile is never closed under a send. ``own_time`` is the time in seconds
    the handler worked after its first step, when it had to be awaited (the request
    metrics' local time; the rest of its wait is remote time).

    The fields are C fields of ``pykfk._core.request_lane.RequestCore``, which the
    compiled request path fills without a Python attribute set; this class adds the
    methods (and no fields: ``__slots__`` is empty).
    """

    __slots__ = ()

    broker: BrokerServices
    registry: Registry
    session: Session

    def __init__(
        self,
        broker: BrokerServices,
        registry: Registry,
        api_key: int,
        api_version: int,
        correlation_id: int,
        client_id: str | None,
        session: Session,
        pinned: list[FileRegion] | None = None,
    ):
        self.broker = broker
        self.registry = registry
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.session = session  # the connection's listener, principal and login state
        self.pinned = [] if pinned is None else pinned
        self.own_time = 0.0

    @property
    def client_host(self) -> str:
        return self.session.client_host

    def allowed(self, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        """Whether the connection's principal may do ``operation`` on the resource
        (always, without an authorizer)."""
        authorizer = self.broker.authorizer
        return authorizer is None or authorizer.authorize(
            self.session.principal, self.session.client_ip, operation, resource_type, name)

    def charge(self, quota_key: str, amount: float) -> int:
        """Count ``amount`` against the client's ``quota_key`` quota; when over it, mute
        the connection and return the throttle time in ms for the answer (KIP-219)."""
        seconds = self.broker.quotas.record(quota_key, self.session.user, self.client_id or "", amount,
                                            self.broker.replica_manager.clock.monotonic())
        if seconds <= 0:
            return 0
        self.session.throttle(seconds)
        self.broker.request_stats.throttle(quota_key, seconds)
        return int(seconds * 1000)

    def allowed_on_cluster(self, operation: Operation) -> bool:
        return self.allowed(operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def __repr__(self) -> str:
        return (
            f"RequestContext(api_key={self.api_key}, api_version={self.api_version}, "
            f"correlation_id={self.correlation_id}, client_id={self.client_id!r})"
        )


def _report_throttle(body: Body, throttle_ms: int) -> None:
    """Kafka answers with the longest of a request's throttles (byte rate, request time)."""
    if throttle_ms and body is not None and "throttle_time_ms" in body:
        answer = cast("dict[str, int]", body)  # a dict at run time
        answer["throttle_time_ms"] = max(answer["throttle_time_ms"], throttle_ms)


class _StepTimer:
    """Awaits a coroutine and adds up the time of its own steps (between its waits)."""

    def __init__(self, awaitable: Awaitable[Body]):
        self._awaitable = awaitable
        self.elapsed = 0.0

    def __await__(self) -> Generator[object, object, Body]:
        steps = self._awaitable.__await__()
        sent: Any = None
        error: BaseException | None = None
        while True:
            started = time.perf_counter()
            try:
                yielded = steps.send(sent) if error is None else steps.throw(error)
            except StopIteration as done:
                self.elapsed += time.perf_counter() - started
                return cast(Body, done.value)
            self.elapsed += time.perf_counter() - started
            try:
                sent, error = (yield yielded), None
            except BaseException as exc:  # noqa: BLE001 - handed on to the coroutine
                sent, error = None, exc


class Failed:
    """A request whose handler failed at once: the connection raises ``error`` when this
    request's turn to be answered comes, so earlier responses still go out first."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException):
        self.error = error


# What ``Dispatcher.prepare`` gives for a request: the response chunks now, None (no
# response), Failed (the handler raised at once), or an awaitable giving chunks or None.
Work = Awaitable[Chunks | None] | Chunks | Failed | None


class Registry:
    """API key -> handler, built from handler modules."""

    def __init__(self, modules: Iterable[ModuleType]):
        from pykfk.protocol.messages import API_SPECS

        self._handlers: dict[int, ApiHandler] = {}
        for module in modules:
            api_key = module.API_KEY
            lo, hi = module.VERSIONS
            spec = API_SPECS.get(api_key)
            if spec is None:
                log.warning("no protocol table for api key %d; not served", api_key)
                continue
            lo, hi = max(lo, spec.min_version), min(hi, spec.max_version)
            if lo > hi:
                log.warning("api key %d: no version both handled and decodable", api_key)
                continue
            if (lo, hi) != tuple(module.VERSIONS):
                log.debug("api key %d served as %d-%d (declared %s)", api_key, lo, hi, module.VERSIONS)
            self._handlers[api_key] = ApiHandler(
                api_key,
                spec.name,
                lo,
                hi,
                module.handle,
                getattr(module, "decode_request", None),
                getattr(module, "encode_response", None),
                NEVER_FLEXIBLE if spec.flexible_from is None else spec.flexible_from,
            )

    @classmethod
    def default(cls) -> Registry:
        return cls(importlib.import_module(f"pykfk.server.handlers.{name}") for name in HANDLER_MODULES)

    def get(self, api_key: int) -> ApiHandler | None:
        return self._handlers.get(api_key)

    def api_versions(self) -> list[ApiVersionsResponseApiVersion]:
        """The ApiVersions ``api_keys`` array, ascending by key."""
        return [
            {"api_key": h.api_key, "min_version": h.min_version, "max_version": h.max_version}
            for h in sorted(self._handlers.values(), key=lambda h: h.api_key)
        ]


class Dispatcher:
    """Turns a request frame into its response chunks, or an awaitable giving them.

    ``request_stats`` counts the requests it starts (by api key and version); the
    connection adds their times once answered, when they are timed."""

    def __init__(self, broker: BrokerServices, registry: Registry):
        self.broker = broker
        self.registry = registry
        self._quotas = getattr(broker, "quotas", None)
        self.request_stats: RequestStats = getattr(broker, "request_stats", None) or RequestStats()
        self._request_counts = self.request_stats.counts
        self._timing = self.request_stats.timing
        # The registry's own table (read once per request; a Registry never swaps it).
        self._handlers = registry._handlers
        from pykfk.protocol import framing
        from pykfk.protocol.messages import API_SPECS

        self._framing = framing
        self._specs = API_SPECS

    def prepare(
        self, frame: bytearray, session: Session
    ) -> tuple[Work, RequestContext | None]:
        """Decode ``frame`` (a request without its size prefix) and start its handler.

        Returns ``(work, ctx)``. Work is the response already: the encoded chunks
        (a list), None (no response: Produce with acks=0) or ``Failed`` (the handler
        raised at once); or an awaitable giving the chunks or None. ctx is the request's
        context, whose pinned regions are released after sending (None for what is not a
        request of a served api: a bare SASL token, an ApiVersions of an unknown version).
        Raises CloseConnection when the request cannot be decoded.
        """
        if session.gated and session.expects_raw_token:
            return self._raw_sasl_token(frame, session), None
        quotas = self._quotas
        timed = quotas is not None and quotas.times_requests
        start = time.perf_counter() if timed else 0.0
        if len(frame) < _FIXED_HEADER_SIZE:
            raise CloseConnection(f"request of {len(frame)} bytes is shorter than a header")
        api_key, api_version, correlation_id = _unpack_fixed_header(frame, 0)
        if session.gated:
            _check_session(session, api_key)
        handler = self._handlers.get(api_key)
        if handler is None:
            raise CloseConnection(f"unknown api key {api_key}")
        if not handler.min_version <= api_version <= handler.max_version:
            if api_key == API_VERSIONS_KEY:
                return self.unsupported_api_versions(correlation_id), None
            raise CloseConnection(f"unsupported version {api_version} of {handler.name}")
        # Served versions stay below VERSION_SLOTS (Kafka's highest is 17).
        self._request_counts[api_key * VERSION_SLOTS + api_version] += 1
        view = memoryview(frame)
        try:
            client_id, body_offset = decode_request_header(view, api_version >= handler.flexible_from)
            if handler.decode is not None:
                request = handler.decode(view, body_offset, api_version)
            else:
                request = self._specs[api_key].decode_request(view, body_offset, api_version)
        except Exception as exc:  # noqa: BLE001 - ProtocolError, or anything a hostile frame provokes
            raise CloseConnection(f"malformed {handler.name} v{api_version} request: {exc}") from None
        ctx = RequestContext(self.broker, self.registry, api_key, api_version, correlation_id, client_id, session)
        if timed and api_key == _FETCH_KEY and request.replica_id >= 0:
            timed = False  # replication is not a client's: Kafka exempts it from request quotas
        try:
            body = handler.handle(ctx, request)
            if timed:
                return self._timed(handler, ctx, body, start), ctx
            if type(body) is dict:
                # Answered at once (the common case, _encode inline).
                if handler.encode is not None:
                    return handler.encode(api_version, correlation_id, body), ctx
                return self._encode(handler, ctx, body), ctx
            if body is not None and not isinstance(body, dict):
                return self._run(handler, ctx, cast("Awaitable[Body]", body)), ctx  # answered later
            return self._encode(handler, ctx, body), ctx
        except Exception as exc:  # noqa: BLE001 - reported when this request's turn comes
            return Failed(exc), ctx

    def _timed(self, handler: ApiHandler, ctx: RequestContext, body: Awaitable[Body] | Body, start: float) -> Work:
        """With request_percentage quotas: the request's handling time, its own steps
        only (not the time it waits), charged to the client once it is answered."""
        if body is not None and not isinstance(body, dict):
            return self._run_timed(handler, ctx, cast("Awaitable[Body]", body), time.perf_counter() - start)
        _report_throttle(body, self._charge_time(ctx, time.perf_counter() - start))
        return self._encode(handler, ctx, body)

    async def _run_timed(self, handler: ApiHandler, ctx: RequestContext, pending: Awaitable[Body],
                         spent: float) -> Chunks | None:
        steps = _StepTimer(pending)
        try:
            body = await steps
        finally:
            throttle_ms = self._charge_time(ctx, spent + steps.elapsed)
        _report_throttle(body, throttle_ms)
        return self._encode_timed(handler, ctx, body, steps.elapsed)

    def _charge_time(self, ctx: RequestContext, seconds: float) -> int:
        return ctx.charge(REQUEST_PERCENTAGE, seconds * 100)  # percent of one thread for one second

    async def _raw_sasl_token(self, frame: bytearray, session: Session) -> Chunks:
        """A SASL token sent as a bare frame after a v0 SaslHandshake; the answer goes
        back the same way. A failed login closes the connection (there is no error
        field to carry it)."""
        from pykfk.security.sasl import AuthenticationError

        assert session.sasl is not None
        try:
            token = await session.sasl.step(bytes(frame))
            if session.sasl.complete:
                session.login_complete()
        except (AuthenticationError, PermissionError) as exc:
            raise CloseConnection(f"SASL login failed: {exc}") from None
        return [_SIZE.pack(len(token)) + token]

    def _run(self, handler: ApiHandler, ctx: RequestContext, pending: Awaitable[Body]
             ) -> Awaitable[Chunks | None]:
        """The work of a handler that answers later. A loop Future a handler gives holds
        the encoded answer already (a parked Fetch, ``pykfk._core.fetch_path``): it is the
        work itself, with no task; any other awaitable gives the body to encode."""
        if isinstance(pending, asyncio.Future):
            return cast("asyncio.Future[Chunks | None]", pending)
        return self._answer(handler, ctx, pending)

    async def _answer(self, handler: ApiHandler, ctx: RequestContext, pending: Awaitable[Body]) -> Chunks | None:
        if not self._timing:
            return self._encode(handler, ctx, await pending)
        # The handler's own steps are local time, its waits between them remote time.
        steps = _StepTimer(pending)
        body = await steps
        return self._encode_timed(handler, ctx, body, steps.elapsed)

    def _encode_timed(self, handler: ApiHandler, ctx: RequestContext, body: Body, worked: float) -> Chunks | None:
        started = time.perf_counter()
        chunks = self._encode(handler, ctx, body)
        ctx.own_time = worked + time.perf_counter() - started
        return chunks

    def _encode(self, handler: ApiHandler, ctx: RequestContext, body: Body) -> Chunks | None:
        if body is None:
            return None
        if handler.encode is not None:
            return handler.encode(ctx.api_version, ctx.correlation_id, body)
        return self._framing.encode_response(ctx.api_key, ctx.api_version, ctx.correlation_id, body)

    def unsupported_api_versions(self, correlation_id: int) -> Chunks:
        """KIP-511 fallback: UNSUPPORTED_VERSION in a v0 body listing what we support."""
        ranges = [(r["api_key"], r["min_version"], r["max_version"]) for r in self.registry.api_versions()]
        return [self._framing.encode_api_versions_fallback(correlation_id, ranges)]
