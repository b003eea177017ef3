"""SaslHandshake (key 17): choose the SASL mechanism of a login.

On a SASL listener, before a login (or, when the session has a lifetime, from
``connections.max.reauth.ms`` or the expiry of its credential, to log in again on the
same connection, v1 only), an enabled mechanism starts a login; v0 means
the tokens then come as bare frames, v1 inside SaslAuthenticate. Anywhere else Kafka
answers ILLEGAL_SASL_STATE.
"""

from __future__ import annotations

import functools

from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security.credentials import scram_credential, token_login, token_settings
from pykfk.server.dispatch import RequestContext

API_KEY = 17
VERSIONS = (0, 1)


def handle(ctx: RequestContext, request: typed.SaslHandshakeRequest) -> typed.SaslHandshakeResponse:
    session = ctx.session
    mechanisms = session.security.mechanisms
    # A session that ends (connections.max.reauth.ms, or its token's or ticket's expiry) may be renewed.
    relogin = session.authenticated and bool(session.expires_at or session.security.reauth_ms) and ctx.api_version >= 1
    in_login = session.sasl is not None and not session.sasl.complete
    if not mechanisms or (session.authenticated and not relogin) or in_login:
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": mechanisms}
    if request.mechanism not in mechanisms:
        return {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "mechanisms": mechanisms}
    store = ctx.broker.metadata
    session.start_login(request.mechanism, ctx.api_version, functools.partial(scram_credential, store),
                        functools.partial(token_login, store, token_settings(ctx.broker.config)),
                        store.delegation_token_end)
    return {"error_code": ErrorCode.NONE, "mechanisms": mechanisms}
