"""What the delegation-token handlers share: Kafka's gate on token requests
(allowTokenRequests, then ``delegation.token.secret.key``) and the renew/expire step
that finds a token by its HMAC, changes it and saves it before answering."""

from __future__ import annotations

from collections.abc import Callable

from pykfk.cluster.metadata import MetadataWriteError
from pykfk.errors import ErrorCode
from pykfk.security import tokens
from pykfk.security.credentials import token_settings
from pykfk.security.tokens import TokenInfo, TokenSettings
from pykfk.server.dispatch import RequestContext

# (settings, the token found by its HMAC or None, the requester, now in ms) ->
# (error code, the changed token or None when refused)
TokenChange = Callable[[TokenSettings, TokenInfo | None, str, int], tuple[int, TokenInfo | None]]


def token_request_refusal(ctx: RequestContext) -> tuple[int | None, TokenSettings]:
    """The error a token request gets before it is looked at (None: go on), and the
    broker's token settings."""
    session = ctx.session
    settings = token_settings(ctx.broker.config)
    if not tokens.requests_allowed(session.security.listener.security_protocol, session.principal,
                                   session.token_authenticated):
        return ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, settings
    if not settings.enabled:
        return ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED, settings
    return None, settings


async def change_token_by_hmac(ctx: RequestContext, mac: bytes, change: TokenChange,
                               *, remove: bool = False) -> tuple[int, int]:
    """(error code, the token's new expiry or -1): the token whose HMAC is ``mac``
    changed by ``change`` and saved (removed with ``remove``) before the answer."""
    refused, settings = token_request_refusal(ctx)
    if refused is not None:
        return refused, -1
    store = ctx.broker.metadata
    try:
        found = tokens.find_by_hmac((await store.delegation_tokens()).values(), settings.secret, mac)
        code, changed = change(settings, found, ctx.session.principal, ctx.broker.replica_manager.clock.time_ms())
        if changed is None:
            return code, -1
        if remove:
            await store.remove_delegation_tokens([changed.token_id])
        else:
            await store.store_delegation_token(changed)
    except MetadataWriteError as exc:
        return exc.code, -1
    return ErrorCode.NONE, changed.expiry_ms
