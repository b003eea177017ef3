"""SaslAuthenticate (key 36): one round of a login started by SaslHandshake v1.

A failed login is answered with SASL_AUTHENTICATION_FAILED after
``connection.failed.authentication.delay.ms`` (slowing password guessing), and the
connection closes once that answer is sent. v1+ tells the client how long the session
lasts (``connections.max.reauth.ms``, KIP-368).
"""

from __future__ import annotations

import asyncio
import logging

from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security.sasl import AuthenticationError
from pykfk.server.dispatch import RequestContext

API_KEY = 36
VERSIONS = (0, 2)

log = logging.getLogger("pykfk.server")


async def handle(ctx: RequestContext, request: typed.SaslAuthenticateRequest) -> typed.SaslAuthenticateResponse:
    session = ctx.session
    sasl = session.sasl
    if sasl is None or sasl.complete or session.handshake_version < 1:
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "error_message": "no SASL login in progress"}
    try:
        token = await sasl.step(bytes(request.auth_bytes))
        lifetime_ms = session.login_complete() if sasl.complete else 0
    except (AuthenticationError, PermissionError) as exc:
        log.info("failed SASL/%s login from %s: %s", sasl.mechanism, session.client_host, exc)
        session.login_failed()
        await asyncio.sleep(session.security.failed_login_delay_s)
        return {"error_code": ErrorCode.SASL_AUTHENTICATION_FAILED, "error_message": str(exc)}
    if sasl.complete:
        log.debug("%s logged in with SASL/%s from %s", session.principal, sasl.mechanism, session.client_host)
    return {"error_code": ErrorCode.NONE, "auth_bytes": token, "session_lifetime_ms": lifetime_ms}
