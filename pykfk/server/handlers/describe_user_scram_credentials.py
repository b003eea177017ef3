"""DescribeUserScramCredentials (key 50): each user's SCRAM mechanisms and iteration
counts; RESOURCE_NOT_FOUND for a named user without credentials, DUPLICATE_RESOURCE for a
user named twice."""

from __future__ import annotations

import collections

from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security.acl import Operation
from pykfk.security.scram import MECHANISM_TYPES, ScramCredential, ScramError
from pykfk.server.dispatch import RequestContext

API_KEY = 50
VERSIONS = (0, 0)


def _infos(credentials: dict[str, str]) -> list[typed.DescribeUserScramCredentialsResponseCredentialInfo]:
    infos: list[typed.DescribeUserScramCredentialsResponseCredentialInfo] = []
    for mechanism, text in sorted(credentials.items()):
        if mechanism not in MECHANISM_TYPES:
            continue
        try:
            iterations = ScramCredential.from_text(text).iterations
        except ScramError:
            continue
        infos.append({"mechanism": MECHANISM_TYPES[mechanism], "iterations": iterations})
    return infos


async def handle(ctx: RequestContext, request: typed.DescribeUserScramCredentialsRequest) -> typed.DescribeUserScramCredentialsResponse:
    if not ctx.allowed_on_cluster(Operation.DESCRIBE):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "results": []}
    asked = None if request.users is None else [u.name for u in request.users]
    found = await ctx.broker.metadata.scram_credentials(asked)
    results: list[typed.DescribeUserScramCredentialsResult] = []
    if asked is None:
        results = [{"user": user, "error_code": ErrorCode.NONE, "credential_infos": _infos(creds)}
                   for user, creds in sorted(found.items())]
    else:
        counts = collections.Counter(asked)
        for user in dict.fromkeys(asked):
            if counts[user] > 1:
                results.append({"user": user, "error_code": ErrorCode.DUPLICATE_RESOURCE,
                                "error_message": f"Cannot describe SCRAM credentials for the same user twice in a "
                                                 f"single request: {user}", "credential_infos": []})
            elif not _infos(found.get(user, {})):
                results.append({"user": user, "error_code": ErrorCode.RESOURCE_NOT_FOUND,
                                "error_message": f"Attempt to describe nonexistent SCRAM credential for user {user}",
                                "credential_infos": []})
            else:
                results.append({"user": user, "error_code": ErrorCode.NONE,
                                "credential_infos": _infos(found[user])})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results": results}
