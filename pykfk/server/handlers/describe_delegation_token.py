"""DescribeDelegationToken (key 41): the live tokens of the given owners (null: of
everyone; empty: none) that the requester owns, requested or renews, or may see through
DESCRIBE on the token (DELEGATION_TOKEN resource of its id) or DESCRIBE_TOKENS on its
owner (USER resource), as Kafka's filterToken. Errors as CreateDelegationToken's."""

from __future__ import annotations

from pykfk.cluster.metadata import MetadataWriteError
from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security import tokens
from pykfk.security.acl import Operation, ResourceType
from pykfk.server.dispatch import RequestContext
from pykfk.server.token_requests import token_request_refusal

API_KEY = 41
VERSIONS = (1, 3)


def _described(token: tokens.TokenInfo, secret: str) -> typed.DescribeDelegationTokenResponseDescribedDelegationToken:
    owner_type, owner_name = tokens.split_principal(token.owner)
    requester_type, requester_name = tokens.split_principal(token.requester)
    renewers: list[typed.DescribeDelegationTokenResponseDescribedDelegationTokenRenewer] = []
    for renewer in token.renewers:
        kind, name = tokens.split_principal(renewer)
        renewers.append({"principal_type": kind, "principal_name": name})
    return {"principal_type": owner_type, "principal_name": owner_name,
            "token_requester_principal_type": requester_type, "token_requester_principal_name": requester_name,
            "issue_timestamp": token.issue_ms, "expiry_timestamp": token.expiry_ms, "max_timestamp": token.max_ms,
            "token_id": token.token_id, "hmac": tokens.token_hmac(secret, token.token_id), "renewers": renewers}


async def handle(ctx: RequestContext, request: typed.DescribeDelegationTokenRequest
                 ) -> typed.DescribeDelegationTokenResponse:
    session = ctx.session
    refused, settings = token_request_refusal(ctx)
    if refused is not None:
        return {"error_code": refused, "tokens": [], "throttle_time_ms": 0}
    owners = None if request.owners is None else [f"{o.principal_type}:{o.principal_name}" for o in request.owners]
    if owners == []:
        return {"error_code": ErrorCode.NONE, "tokens": [], "throttle_time_ms": 0}
    try:
        stored = await ctx.broker.metadata.delegation_tokens()
    except MetadataWriteError as exc:
        return {"error_code": exc.code, "tokens": [], "throttle_time_ms": 0}
    now_ms = ctx.broker.clock.time_ms()
    principal = session.principal

    def may_describe_token(token_id: str) -> bool:
        return ctx.allowed(Operation.DESCRIBE, ResourceType.DELEGATION_TOKEN, token_id)

    def may_describe_owner(owner: str) -> bool:
        return ctx.allowed(Operation.DESCRIBE_TOKENS, ResourceType.USER, owner)

    described = [_described(token, settings.secret)
                 for _id, token in sorted(stored.items())
                 if not token.expired(now_ms)
                 and tokens.visible(token, principal, owners, may_describe_token, may_describe_owner)]
    return {"error_code": ErrorCode.NONE, "tokens": described, "throttle_time_ms": 0}
