"""SASL logins as the broker runs them: PLAIN, SCRAM-SHA-256/512, OAUTHBEARER, GSSAPI.

``SaslServer`` is one login on one connection: each ``step`` takes a client token and
returns the broker's, until ``complete``. ``SaslClient`` is the other side, for brokers
logging in to brokers. Credentials come from outside: PLAIN users from the listener's
JAAS settings, SCRAM credentials through a lookup (the metadata store).
"""

from __future__ import annotations

import dataclasses
import hmac
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from pykfk.security.kerberos import MECHANISM as GSSAPI
from pykfk.security.kerberos import GssapiAcceptor, GssapiServer
from pykfk.security.oauth import CONTROL_A, OAuthBearerServer
from pykfk.security.oauth import MECHANISM as OAUTHBEARER
from pykfk.security.scram import MECHANISMS as SCRAM_MECHANISMS
from pykfk.security.scram import ScramClient, ScramCredential, ScramError, ScramServer
from pykfk.security.tokens import TOKEN_AUTH_EXTENSION

SUPPORTED_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS, OAUTHBEARER, GSSAPI)
# What a broker logs in to other brokers with (SaslClient).
CLIENT_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS, OAUTHBEARER)

# A bearer token -> (principal name, expiry in ms); raises pykfk.security.oauth.TokenRejected.
TokenValidation = Callable[[str], Awaitable[tuple[str, int]]]

# (user, mechanism) -> the user's SCRAM credential, or None when there is none.
CredentialLookup = Callable[[str, str], Awaitable[ScramCredential | None]]


@dataclasses.dataclass(frozen=True)
class TokenLogin:
    """What a delegation token logs in with: its SCRAM credential, its owner's name (the
    principal the login takes) and its expiry (ms since the epoch)."""

    credential: ScramCredential
    owner: str
    expiry_ms: int


# (token id, mechanism) -> the live token's login, or None (unknown, expired, disabled).
TokenLookup = Callable[[str, str], Awaitable[TokenLogin | None]]


def client_login_settings(props: Mapping[str, str], mechanism: str) -> dict[str, Any]:
    """What a client's SASL login takes from its properties besides user and password:
    the OAUTHBEARER client credentials (``oauth``), and the SCRAM extensions
    (``sasl_extensions``): ``tokenauth="true"`` in ``ScramLoginModule``'s options makes a
    delegation token login. Raises ValueError naming the property."""
    from pykfk.security.jaas import JaasError, parse_jaas
    from pykfk.security.oauth_login import client_credentials_from_properties

    if mechanism == OAUTHBEARER:
        return {"oauth": client_credentials_from_properties(props), "sasl_extensions": ()}
    try:
        options = parse_jaas(props["sasl.jaas.config"]).options if props.get("sasl.jaas.config") else {}
    except JaasError as exc:
        raise ValueError(f"sasl.jaas.config: {exc}") from None
    token_auth = options.get(TOKEN_AUTH_EXTENSION, "").lower() == "true"
    return {"oauth": None, "sasl_extensions": ((TOKEN_AUTH_EXTENSION, "true"),) if token_auth else ()}


class AuthenticationError(Exception):
    """The login failed; the message is what the client is told."""


class SaslServer:
    """One login. ``user`` is set once ``complete``."""

    def __init__(self, mechanism: str, plain_users: Mapping[str, str], lookup: CredentialLookup,
                 token_lookup: TokenLookup | None = None, tokens_without_extension: bool = False,
                 validate_bearer: TokenValidation | None = None, kerberos: GssapiAcceptor | None = None):
        if mechanism not in SUPPORTED_MECHANISMS:
            raise ValueError(f"unsupported SASL mechanism {mechanism}")
        self.mechanism = mechanism
        self.complete = False
        self.user = ""
        # When the credential ends (ms since the epoch): a delegation token's, a
        # bearer token's or a Kerberos ticket's expiry; None for passwords.
        self.credential_expiry_ms: int | None = None
        self.delegation_token = ""  # the id of the delegation token logged in with
        self._plain_users = plain_users
        self._lookup = lookup
        self._token_lookup = token_lookup
        self._tokens_without_extension = tokens_without_extension
        self._token_owner = ""
        self._scram = ScramServer(mechanism) if mechanism in SCRAM_MECHANISMS else None
        self._oauth: OAuthBearerServer | None = None
        if mechanism == OAUTHBEARER:
            if validate_bearer is None:
                raise ValueError("OAUTHBEARER needs a token validator")
            self._oauth = OAuthBearerServer(validate_bearer, AuthenticationError)
        self._gssapi: GssapiServer | None = None
        if mechanism == GSSAPI:
            if kerberos is None:
                raise ValueError("GSSAPI needs the broker's keytab")
            self._gssapi = GssapiServer(kerberos, AuthenticationError)
        self._round = 0

    async def step(self, token: bytes) -> bytes:
        if self.complete:
            raise AuthenticationError("the login is already complete")
        self._round += 1
        if self._gssapi is not None:
            answer = self._gssapi.step(token)
            self.user, self.complete = self._gssapi.user, self._gssapi.complete
            if self.complete:
                self.credential_expiry_ms = self._gssapi.expiry_ms
            return answer
        if self._oauth is not None:
            answer = await self._oauth.step(token)
            self.user, self.complete = self._oauth.user, self._oauth.complete
            if self.complete:
                self.credential_expiry_ms = self._oauth.expiry_ms
            return answer
        if self._scram is None:
            return self._plain(token)
        try:
            if self._round == 1:
                user = self._scram.parse_first(token)
                credential = await self._credential(user)
                if credential is None:
                    raise AuthenticationError("Authentication failed during authentication due to "
                                              "invalid credentials with SASL mechanism " + self.mechanism)
                return self._scram.first(credential)
            answer = self._scram.final(token)
        except ScramError as exc:
            raise AuthenticationError(f"Authentication failed: {exc}") from None
        self.user = self._token_owner or self._scram.user
        self.complete = True
        return answer

    async def _credential(self, user: str) -> ScramCredential | None:
        """The user's credential; with the ``tokenauth=true`` extension that of the
        delegation token ``user`` names (and, where ``tokens_without_extension``, of a
        token whose id names no user: clients that cannot send extensions)."""
        assert self._scram is not None
        token_auth = self._scram.extensions.get(TOKEN_AUTH_EXTENSION, "").lower() == "true"
        if not token_auth:
            credential = await self._lookup(user, self.mechanism)
            if credential is not None or not self._tokens_without_extension:
                return credential
        if self._token_lookup is None:
            return None
        login = await self._token_lookup(user, self.mechanism)
        if login is None:
            return None
        self._token_owner = login.owner
        self.credential_expiry_ms = login.expiry_ms
        self.delegation_token = user
        return login.credential

    def _plain(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationError("Invalid SASL/PLAIN response: expected 3 tokens")
        try:
            authzid, user, password = (part.decode() for part in parts)
        except UnicodeDecodeError:
            raise AuthenticationError("Invalid SASL/PLAIN response: not UTF-8") from None
        if not user:
            raise AuthenticationError("Authentication failed: username not specified")
        if authzid and authzid != user:
            raise AuthenticationError("Authentication failed: Client requested an authorization id "
                                      "that is different from username")
        expected = self._plain_users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise AuthenticationError("Authentication failed: Invalid username or password")
        self.user = user
        self.complete = True
        return b""


class SaslClient:
    """A broker's own login to another broker: ``first()``, then ``step(server_token)``
    until it returns None. OAUTHBEARER sends ``bearer_token`` (RFC 7628's client
    response, with ``extensions``); a refused token is answered with the error
    exchange's ``\\x01``, after which the broker fails the login."""

    def __init__(self, mechanism: str, user: str, password: str, extensions: dict[str, str] | None = None,
                 bearer_token: str = ""):
        if mechanism not in CLIENT_MECHANISMS:
            raise ValueError(f"unsupported SASL client mechanism {mechanism}")
        if mechanism == OAUTHBEARER and not bearer_token:
            raise ValueError("OAUTHBEARER needs a token")
        self.mechanism = mechanism
        self._user, self._password = user, password
        self._bearer = bearer_token
        self._extensions = dict(extensions or {})
        self._scram = (ScramClient(mechanism, user, password, extensions) if mechanism in SCRAM_MECHANISMS
                       else None)
        self._round = 0

    def first(self) -> bytes:
        if self.mechanism == OAUTHBEARER:
            pairs = "".join(f"{key}={value}\x01" for key, value in self._extensions.items())
            return f"n,,\x01auth=Bearer {self._bearer}\x01{pairs}\x01".encode()
        if self._scram is None:
            return b"\0" + self._user.encode() + b"\0" + self._password.encode()
        return self._scram.first()

    def step(self, server_token: bytes) -> bytes | None:
        self._round += 1
        if self.mechanism == OAUTHBEARER:
            # An answer with content is the error JSON: acknowledge it (the broker then fails the login).
            return CONTROL_A if server_token and self._round == 1 else None
        if self._scram is None:
            return None
        if self._round == 1:
            return self._scram.final(server_token)
        self._scram.check(server_token)
        return None
