"""SASL/OAUTHBEARER on the broker (RFC 7628, KIP-255, KIP-768): JWTs from an OpenID
Connect identity provider, checked against its JWKS.

The client's message is ``n,[a=<authzid>],\\x01auth=Bearer <jwt>\\x01[key=value\\x01]...\\x01``.
A token is accepted when its signature verifies with a key of the JWKS (found by ``kid``;
asymmetric algorithms only), it has not expired and was not issued in the future (with
``sasl.oauthbearer.clock.skew.seconds``), its issuer and audience are the expected ones
where set, it carries ``iat`` and the principal claim (``sasl.oauthbearer.sub.claim.name``),
and its scopes (``sasl.oauthbearer.scope.claim.name``: one string or a list) are
non-blank and none twice, as Kafka's validator asks; the principal is ``User:<that
claim>``. Kafka asks for required scopes only with its unsecured validator
(``unsecuredValidatorRequiredScope``; a token lacking one gets ``insufficient_scope``);
a signed token is bound to the brokers by its audience
(``sasl.oauthbearer.expected.audience``). A refused token is answered as Kafka answers it: the
JSON ``{"status":"invalid_token"}`` as server challenge, and once the client acknowledges
it with ``\\x01``, SASL_AUTHENTICATION_FAILED with that JSON as message.

Keys come from ``sasl.oauthbearer.jwks.endpoint.url`` (https://, http:// or file:),
fetched in a worker thread, never on the event loop: at the first login, every
``sasl.oauthbearer.jwks.endpoint.refresh.ms``, and when a token names a key id the set
lacks (key rotation), at most once per ``...retry.backoff.ms``. A login waits at most
``KEY_WAIT_S`` for a fetch it needs; an endpoint that hangs or serves garbage leaves the
keys as they were and other logins go on. Unsecured tokens (``alg: none``) are accepted
only where Kafka's unsecured validator is named explicitly, for development.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

log = logging.getLogger("pykfk.security")

MECHANISM = "OAUTHBEARER"
UNSECURED_VALIDATOR = ("org.apache.kafka.common.security.oauthbearer.internals.unsecured."
                       "OAuthBearerUnsecuredValidatorCallbackHandler")
SECURED_VALIDATORS = ("org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
                      "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler")
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
MAX_TOKEN_BYTES = 64 * 1024  # a JWT larger than this is refused unread
MAX_JWKS_BYTES = 1024 * 1024
KEY_WAIT_S = 1.0  # the longest a login waits for a JWKS fetch
FETCH_TIMEOUT_S = 10.0
CONTROL_A = b"\x01"
INVALID_TOKEN = json.dumps({"status": "invalid_token"}, separators=(",", ":"))


class TokenRejected(Exception):
    """A token that does not pass; the message says why (for the broker's log).
    ``scope``: the required scope it lacks (Kafka's insufficient_scope answer)."""

    def __init__(self, message: str, scope: str | None = None):
        super().__init__(message)
        self.scope = scope


def error_json(status: str, scope: str | None = None) -> str:
    """Kafka's JSON error answer (its exact spelling: a space after the comma)."""
    return f'{{"status":"{status}"' + (f', "scope":"{scope}"' if scope is not None else "") + "}"


def claim_scopes(claims: dict[str, Any], scope_claim: str, split_string: bool = False) -> frozenset[str]:
    """The scopes of a token: Kafka's validator reads a string claim as one scope (its
    unsecured one as space-separated scopes) and a list as scopes; each must be
    non-blank and appear once. Raises TokenRejected."""
    raw = claims.get(scope_claim)
    if isinstance(raw, str):
        values: list[Any] = raw.split(" ") if split_string else [raw]
        if split_string:
            values = [v for v in values if v]
    elif isinstance(raw, list):
        values = raw
    else:
        return frozenset()
    seen: set[str] = set()
    for value in values:
        if not isinstance(value, str) or not value.strip():
            raise TokenRejected(f"the {scope_claim!r} claim holds a blank or non-string scope")
        if value.strip() in seen:
            raise TokenRejected(f"the {scope_claim!r} claim holds {value.strip()!r} twice")
        seen.add(value.strip())
    return frozenset(seen)


def parse_client_response(message: bytes) -> tuple[str, str, dict[str, str]]:
    """(authorization id, token, extensions) of a client's first message (RFC 7628)."""
    try:
        text = message.decode()
    except UnicodeDecodeError:
        raise TokenRejected("the message is not UTF-8") from None
    gs2, sep, rest = text.partition(",\x01")
    if not sep or not gs2.startswith("n,") or not rest.endswith("\x01\x01"):
        raise TokenRejected("not an OAUTHBEARER client response")
    authzid = gs2[2:]
    if authzid and not authzid.startswith("a="):
        raise TokenRejected("malformed authorization id")
    pairs: dict[str, str] = {}
    for item in rest[:-2].split("\x01"):
        key, eq, value = item.partition("=")
        if not eq or not key.isascii() or not key.isalpha():
            raise TokenRejected("malformed key=value pair")
        pairs[key] = value
    auth = pairs.pop("auth", "")
    scheme, _space, token = auth.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise TokenRejected("no bearer token")
    return authzid[2:], token.strip(), pairs


class JwksKeys:
    """The identity provider's signing keys by key id, fetched off the loop."""

    def __init__(self, url: str, refresh_ms: int, backoff_ms: int, ssl_context: ssl.SSLContext | None = None,
                 fetch: Callable[[], bytes] | None = None):
        self.url = url
        self.refresh_s = refresh_ms / 1000
        self.backoff_s = backoff_ms / 1000
        self._ssl_context = ssl_context
        self._fetch = fetch or self._read
        self._keys: dict[str, Any] = {}
        self._fetched_at = -1e18
        self._attempted_at = -1e18
        self._inflight: asyncio.Task[None] | None = None
        self._failing = False

    def _read(self) -> bytes:
        """The JWKS document (in a worker thread)."""
        scheme = urllib.parse.urlsplit(self.url).scheme
        if scheme == "file":
            with open(urllib.request.url2pathname(urllib.parse.urlsplit(self.url).path), "rb") as f:
                return f.read(MAX_JWKS_BYTES + 1)
        if scheme not in ("http", "https"):
            raise ValueError(f"unsupported JWKS URL scheme {scheme!r}")
        request = urllib.request.Request(self.url, headers={"Accept": "application/json"})
        with urllib.request.urlopen(request, timeout=FETCH_TIMEOUT_S, context=self._ssl_context) as answer:
            return bytes(answer.read(MAX_JWKS_BYTES + 1))

    async def _refresh(self) -> None:
        from jwt import PyJWKSet

        self._attempted_at = time.monotonic()
        try:
            data = await asyncio.get_running_loop().run_in_executor(None, self._fetch)
            if len(data) > MAX_JWKS_BYTES:
                raise ValueError("larger than 1 MiB")
            keys = {key.key_id: key for key in PyJWKSet.from_json(data.decode()).keys if key.key_id}
            if not keys:
                raise ValueError("no key with a key id")
        except Exception as exc:  # noqa: BLE001 - any failure of the endpoint leaves the keys as they were
            if not self._failing:
                log.warning("JWKS from %s not usable, keeping %d known keys: %s", self.url, len(self._keys),
                            str(exc)[:200] or type(exc).__name__)
            self._failing = True
            return
        if self._failing:
            log.info("JWKS from %s usable again: %d keys", self.url, len(keys))
        self._failing = False
        self._keys, self._fetched_at = keys, time.monotonic()

    def _start_refresh(self) -> asyncio.Task[None]:
        if self._inflight is None or self._inflight.done():
            self._inflight = asyncio.get_running_loop().create_task(self._refresh())
        return self._inflight

    async def key(self, kid: str) -> Any:
        """The key of ``kid``, or None: a fetch starts when the set is stale, or lacks
        ``kid`` and none was tried within the backoff; the login waits for it briefly."""
        now = time.monotonic()
        stale = now - self._fetched_at >= self.refresh_s
        missing = kid not in self._keys
        if stale or (missing and now - self._attempted_at >= self.backoff_s):
            task = self._start_refresh()
            if missing or not self._keys:
                await asyncio.wait([task], timeout=KEY_WAIT_S)
        elif missing and self._inflight is not None and not self._inflight.done():
            await asyncio.wait([self._inflight], timeout=KEY_WAIT_S)
        return self._keys.get(kid)


class TokenValidator:
    """Checks a JWT and gives its principal name; raises TokenRejected."""

    def __init__(self, keys: JwksKeys | None, *, audience: Sequence[str] = (), issuer: str | None = None,
                 sub_claim: str = "sub", clock_skew_s: int = 30, unsecured: bool = False,
                 scope_claim: str = "scope", required_scope: Sequence[str] = ()):
        self.keys = keys
        self.audience = list(audience)
        self.issuer = issuer or None
        self.sub_claim = sub_claim
        self.clock_skew_s = clock_skew_s
        self.unsecured = unsecured
        self.scope_claim = scope_claim
        # Kafka checks required scopes only with its unsecured validator
        # (unsecuredValidatorRequiredScope); a secured one checks the audience.
        self.required_scope = list(required_scope)

    async def validate(self, token: str) -> tuple[str, int]:
        """(principal name, the end of its validity in ms since the epoch) of a valid token."""
        import jwt

        if len(token) > MAX_TOKEN_BYTES:
            raise TokenRejected(f"token of {len(token)} bytes")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise TokenRejected(f"malformed token: {exc}") from None
        algorithm = header.get("alg")
        if algorithm == "none" and self.unsecured and self.keys is None:
            claims = self._claims(jwt, token, None, [])
            scopes = claim_scopes(claims, self.scope_claim, split_string=True)
            for needed in self.required_scope:
                if needed not in scopes:
                    raise TokenRejected(f"the token's scope lacks {needed!r}", scope=needed)
        else:
            if algorithm not in ALGORITHMS:
                raise TokenRejected(f"algorithm {algorithm!r} not accepted")
            kid = header.get("kid")
            if not isinstance(kid, str) or self.keys is None:
                raise TokenRejected("no key id in the token header")
            key = await self.keys.key(kid)
            if key is None:
                raise TokenRejected(f"no key {kid!r} in the JWKS")
            claims = self._claims(jwt, token, key.key, [str(algorithm)])
            claim_scopes(claims, self.scope_claim)
        principal = claims.get(self.sub_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise TokenRejected(f"no {self.sub_claim!r} claim")
        principal = principal.strip()
        # Usable until it would be refused: its expiry plus the tolerated skew.
        return principal, int((float(claims["exp"]) + self.clock_skew_s) * 1000)

    def _claims(self, jwt: Any, token: str, key: Any, algorithms: list[str]) -> dict[str, Any]:
        # Kafka's validator requires exp and iat of a signed token (its unsecured one, exp only).
        required = ["exp", "iat"] if key is not None else ["exp"]
        options = {"require": required, "verify_aud": bool(self.audience), "verify_signature": key is not None}
        try:
            claims: dict[str, Any] = jwt.decode(
                token, key, algorithms=algorithms, audience=self.audience or None, issuer=self.issuer,
                leeway=self.clock_skew_s, options=options)
        except jwt.PyJWTError as exc:
            raise TokenRejected(f"{type(exc).__name__}: {exc}") from None
        return claims


class OAuthBearerServer:
    """One server side of an OAUTHBEARER login: ``step(message)`` gives the answer, or
    raises the ``fail`` exception type with the message the client is told."""

    def __init__(self, validate: Callable[[str], Awaitable[tuple[str, int]]], fail: Callable[[str], Exception]):
        self._validate = validate
        self._fail = fail
        self._error: str | None = None
        self.complete = False
        self.user = ""
        self.expiry_ms = 0  # the token's, once complete

    async def step(self, message: bytes) -> bytes:
        if message == CONTROL_A and self._error is not None:
            raise self._fail(self._error)
        self._error = None
        try:
            authzid, token, _extensions = parse_client_response(message)
            user, expiry_ms = await self._validate(token)
        except TokenRejected as exc:
            log.info("OAUTHBEARER token refused: %s", exc)
            self._error = INVALID_TOKEN if exc.scope is None else error_json("insufficient_scope", exc.scope)
            return self._error.encode()
        if authzid and authzid != user:
            raise self._fail(f"Authentication failed: Client requested an authorization id ({authzid}) that is "
                             f"different from the token's principal name ({user})")
        self.user, self.expiry_ms = user, expiry_ms
        self.complete = True
        return b""
