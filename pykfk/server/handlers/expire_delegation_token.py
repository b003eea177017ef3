"""ExpireDelegationToken (key 40): the owner, requester or a renewer of the token whose
HMAC is given brings its expiry to now + the period (capped by its maximum lifetime); a
negative period removes the token at once. Errors as RenewDelegationToken's."""

from __future__ import annotations

from pykfk.protocol import typed
from pykfk.security import tokens
from pykfk.server.dispatch import RequestContext
from pykfk.server.token_requests import change_token_by_hmac

API_KEY = 40
VERSIONS = (1, 2)


async def handle(ctx: RequestContext, request: typed.ExpireDelegationTokenRequest
                 ) -> typed.ExpireDelegationTokenResponse:
    code, expiry = await change_token_by_hmac(
        ctx, bytes(request.hmac),
        lambda _settings, found, principal, now_ms: tokens.expire(
            found, principal, request.expiry_time_period_ms, now_ms),
        remove=request.expiry_time_period_ms < 0)
    return {"error_code": code, "expiry_timestamp_ms": expiry}
