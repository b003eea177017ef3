"""CreateDelegationToken (key 38): a token for the requester or, from v3, for another
owner, which takes CREATE_TOKENS on that owner's USER resource (KIP-373). Kafka's checks:
DELEGATION_TOKEN_REQUEST_NOT_ALLOWED over PLAINTEXT, anonymous TLS or a token login,
INVALID_PRINCIPAL_TYPE for an owner or renewer that is not a User,
DELEGATION_TOKEN_AUTH_DISABLED without ``delegation.token.secret.key``. Expired tokens
are removed from the store on the way."""

from __future__ import annotations

from pykfk.cluster.metadata import MetadataWriteError
from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security import tokens
from pykfk.security.acl import Operation, ResourceType
from pykfk.security.credentials import token_settings
from pykfk.server.dispatch import RequestContext

API_KEY = 38
VERSIONS = (1, 3)


def _answer(code: int, owner: str, requester: str, message: str = "") -> typed.CreateDelegationTokenResponse:
    owner_type, owner_name = tokens.split_principal(owner)
    requester_type, requester_name = tokens.split_principal(requester)
    return {"error_code": code, "principal_type": owner_type, "principal_name": owner_name,
            "token_requester_principal_type": requester_type, "token_requester_principal_name": requester_name,
            "issue_timestamp_ms": -1, "expiry_timestamp_ms": -1, "max_timestamp_ms": -1, "token_id": "",
            "hmac": b"", "throttle_time_ms": 0}


async def handle(ctx: RequestContext, request: typed.CreateDelegationTokenRequest
                 ) -> typed.CreateDelegationTokenResponse:
    session = ctx.session
    requester = session.principal
    owner = (f"{request.owner_principal_type}:{request.owner_principal_name}"
             if request.owner_principal_name else requester)
    if not tokens.requests_allowed(session.security.listener.security_protocol, requester,
                                   session.token_authenticated):
        return _answer(ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, owner, requester)
    if tokens.split_principal(owner)[0] != tokens.USER_TYPE:
        return _answer(ErrorCode.INVALID_PRINCIPAL_TYPE, owner, requester)
    if owner != requester and not ctx.allowed(Operation.CREATE_TOKENS, ResourceType.USER, owner):
        return _answer(ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED, owner, requester)
    if any(r.principal_type != tokens.USER_TYPE for r in request.renewers):
        return _answer(ErrorCode.INVALID_PRINCIPAL_TYPE, owner, requester)
    settings = token_settings(ctx.broker.config)
    if not settings.enabled:
        return _answer(ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED, owner, requester)
    now_ms = ctx.broker.clock.time_ms()
    token = tokens.create(settings, owner, requester, (f"{r.principal_type}:{r.principal_name}" for r in request.renewers),
                          request.max_lifetime_ms, now_ms)
    store = ctx.broker.metadata
    try:
        expired = [t.token_id for t in (await store.delegation_tokens()).values() if t.expired(now_ms)]
        if expired:
            await store.remove_delegation_tokens(expired)
        await store.store_delegation_token(token)
    except MetadataWriteError as exc:
        return _answer(exc.code, owner, requester)
    return {**_answer(ErrorCode.NONE, owner, requester), "issue_timestamp_ms": token.issue_ms,
            "expiry_timestamp_ms": token.expiry_ms, "max_timestamp_ms": token.max_ms, "token_id": token.token_id,
            "hmac": tokens.token_hmac(settings.secret, token.token_id)}
