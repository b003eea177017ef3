"""ExpireDelegationToken (key 40): the owner, requester or a renewer of the token whose
HMAC is given brings its expiry to now + the period (capped by its maximum lifetime); a
negative period removes the token at once. Errors as RenewDelegationToken's."""

from __future__ import annotations

import time

from pykfk.cluster.metadata import MetadataWriteError
from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security import tokens
from pykfk.security.credentials import token_settings
from pykfk.server.dispatch import RequestContext

API_KEY = 40
VERSIONS = (1, 2)


async def handle(ctx: RequestContext, request: typed.ExpireDelegationTokenRequest
                 ) -> typed.ExpireDelegationTokenResponse:
    session = ctx.session
    if not tokens.requests_allowed(session.security.listener.security_protocol, session.principal,
                                   session.token_authenticated):
        return {"error_code": ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, "expiry_timestamp_ms": -1}
    settings = token_settings(ctx.broker.config)
    if not settings.enabled:
        return {"error_code": ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED, "expiry_timestamp_ms": -1}
    store = ctx.broker.metadata
    now_ms = int(time.time() * 1000)
    try:
        found = tokens.find_by_hmac((await store.delegation_tokens()).values(), settings.secret, bytes(request.hmac))
        code, changed = tokens.expire(found, session.principal, request.expiry_time_period_ms, now_ms)
        if changed is None:
            return {"error_code": code, "expiry_timestamp_ms": -1}
        if request.expiry_time_period_ms < 0:
            await store.remove_delegation_tokens([changed.token_id])
        else:
            await store.store_delegation_token(changed)
    except MetadataWriteError as exc:
        return {"error_code": exc.code, "expiry_timestamp_ms": -1}
    return {"error_code": ErrorCode.NONE, "expiry_timestamp_ms": changed.expiry_ms}
