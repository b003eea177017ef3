"""AlterUserScramCredentials (key 51): set or remove SCRAM credentials, per user all or
nothing, with Kafka's checks: a known mechanism (UNSUPPORTED_SASL_MECHANISM), an
iteration count in [4096, 16384], a non-empty user, salt and salted password
(UNACCEPTABLE_CREDENTIAL), a user not both set and removed for one mechanism
(DUPLICATE_RESOURCE), and a removed credential that exists (RESOURCE_NOT_FOUND)."""

from __future__ import annotations

import collections

from pykfk.cluster.metadata import MetadataWriteError
from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.protocol.messages import API_SPECS
from pykfk.protocol.types import ProtocolError, Struct
from pykfk.security.acl import Operation
from pykfk.security.scram import (
    MAX_ITERATIONS,
    MECHANISM_NAMES,
    MIN_ITERATIONS,
    credential_from_salted,
)
from pykfk.server.dispatch import RequestContext

API_KEY = 51
VERSIONS = (0, 0)
_SPEC = API_SPECS[API_KEY]


def decode_request(view: memoryview, offset: int, version: int) -> Struct:
    """The declared layout, then at most a few zero bytes: librdkafka (2.16) ends this
    request with one empty tagged-field section more than the layout has, which Kafka
    ignores. Anything else after the body is refused, as for every request."""
    value, end = _SPEC.request_decoder(version)(view, offset)
    if len(view) - end > 4 or any(view[end:]):
        raise ProtocolError(f"AlterUserScramCredentials v{version} request has {len(view) - end} trailing bytes")
    return value


def _upsertion_error(item: typed.AlterUserScramCredentialsRequestScramCredentialUpsertion) -> tuple[int, str] | None:
    if item.mechanism not in MECHANISM_NAMES:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"Unknown SCRAM mechanism {item.mechanism}"
    if not item.name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if not MIN_ITERATIONS <= item.iterations <= MAX_ITERATIONS:
        return (ErrorCode.UNACCEPTABLE_CREDENTIAL,
                f"Iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}, not {item.iterations}")
    if not item.salt or not item.salted_password:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty"
    return None


async def handle(ctx: RequestContext, request: typed.AlterUserScramCredentialsRequest
                 ) -> typed.AlterUserScramCredentialsResponse:
    store = ctx.broker.metadata
    if not ctx.allowed_on_cluster(Operation.ALTER):
        named = dict.fromkeys(i.name for i in (*request.deletions, *request.upsertions))
        return {"throttle_time_ms": 0, "results": [
            {"user": u, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED} for u in named]}
    errors: dict[str, tuple[int, str]] = {}
    pairs = collections.Counter((i.name, i.mechanism) for i in (*request.deletions, *request.upsertions))
    for (user, _mechanism), count in pairs.items():
        if count > 1:
            errors.setdefault(user, (ErrorCode.DUPLICATE_RESOURCE,
                                     f"A user credential cannot be altered twice in the same request: {user}"))
    for item in request.upsertions:
        error = _upsertion_error(item)
        if error is not None:
            errors.setdefault(item.name, error)
    users = list(dict.fromkeys(i.name for i in (*request.deletions, *request.upsertions)))
    try:
        existing = await store.scram_credentials(users)
    except MetadataWriteError as exc:
        return {"throttle_time_ms": 0, "results": [
            {"user": u, "error_code": exc.code, "error_message": exc.message} for u in users]}
    for deletion in request.deletions:
        deleted = MECHANISM_NAMES.get(deletion.mechanism)
        if deleted is None:
            errors.setdefault(deletion.name, (ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                              f"Unknown SCRAM mechanism {deletion.mechanism}"))
        elif deleted not in existing.get(deletion.name, {}):
            errors.setdefault(deletion.name, (ErrorCode.RESOURCE_NOT_FOUND,
                                              f"Attempt to delete a user credential that does not exist: {deletion.name}"))
    results: list[typed.AlterUserScramCredentialsResult] = []
    for user in users:
        if user in errors:
            code, message = errors[user]
            results.append({"user": user, "error_code": code, "error_message": message})
            continue
        deletions = [MECHANISM_NAMES[i.mechanism] for i in request.deletions if i.name == user]
        upserts: dict[str, str] = {}
        for item in request.upsertions:
            if item.name == user:
                mechanism = MECHANISM_NAMES[item.mechanism]
                upserts[mechanism] = credential_from_salted(
                    mechanism, bytes(item.salted_password), bytes(item.salt), item.iterations).to_text()
        try:
            await store.alter_scram_credentials(user, upserts, deletions)
        except MetadataWriteError as exc:
            results.append({"user": user, "error_code": exc.code, "error_message": exc.message})
            continue
        results.append({"user": user, "error_code": ErrorCode.NONE})
    return {"throttle_time_ms": 0, "results": results}
