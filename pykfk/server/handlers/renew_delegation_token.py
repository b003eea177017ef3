"""RenewDelegationToken (key 39): the owner, requester or a renewer of the token whose
HMAC is given pushes its expiry to now + the period (``delegation.token.expiry.time.ms``
for a negative one), never past its maximum lifetime. Kafka's errors:
DELEGATION_TOKEN_NOT_FOUND, DELEGATION_TOKEN_OWNER_MISMATCH, DELEGATION_TOKEN_EXPIRED,
and those of any token request (CreateDelegationToken)."""

from __future__ import annotations

import time

from pykfk.cluster.metadata import MetadataWriteError
from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security import tokens
from pykfk.security.credentials import token_settings
from pykfk.server.dispatch import RequestContext

API_KEY = 39
VERSIONS = (1, 2)


async def handle(ctx: RequestContext, request: typed.RenewDelegationTokenRequest
                 ) -> typed.RenewDelegationTokenResponse:
    session = ctx.session
    if not tokens.requests_allowed(session.security.listener.security_protocol, session.principal,
                                   session.token_authenticated):
        return {"error_code": ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, "expiry_timestamp_ms": -1}
    settings = token_settings(ctx.broker.config)
    if not settings.enabled:
        return {"error_code": ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED, "expiry_timestamp_ms": -1}
    store = ctx.broker.metadata
    try:
        found = tokens.find_by_hmac((await store.delegation_tokens()).values(), settings.secret, bytes(request.hmac))
        code, renewed = tokens.renew(settings, found, session.principal, request.renew_period_ms,
                                     int(time.time() * 1000))
        if renewed is None:
            return {"error_code": code, "expiry_timestamp_ms": -1}
        await store.store_delegation_token(renewed)
    except MetadataWriteError as exc:
        return {"error_code": exc.code, "expiry_timestamp_ms": -1}
    return {"error_code": ErrorCode.NONE, "expiry_timestamp_ms": renewed.expiry_ms}
