"""RenewDelegationToken (key 39): the owner, requester or a renewer of the token whose
HMAC is given pushes its expiry to now + the period (``delegation.token.expiry.time.ms``
for a negative one), never past its maximum lifetime. Kafka's errors:
DELEGATION_TOKEN_NOT_FOUND, DELEGATION_TOKEN_OWNER_MISMATCH, DELEGATION_TOKEN_EXPIRED,
and those of any token request (CreateDelegationToken)."""

from __future__ import annotations

from pykfk.protocol import typed
from pykfk.security import tokens
from pykfk.server.dispatch import RequestContext
from pykfk.server.token_requests import change_token_by_hmac

API_KEY = 39
VERSIONS = (1, 2)


async def handle(ctx: RequestContext, request: typed.RenewDelegationTokenRequest
                 ) -> typed.RenewDelegationTokenResponse:
    code, expiry = await change_token_by_hmac(
        ctx, bytes(request.hmac),
        lambda settings, found, principal, now_ms: tokens.renew(
            settings, found, principal, request.renew_period_ms, now_ms))
    return {"error_code": code, "expiry_timestamp_ms": expiry}
