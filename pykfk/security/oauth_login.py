"""A broker's own OAUTHBEARER login (KIP-255, KIP-768): the token it presents to other
brokers, from the identity provider's token endpoint with the client-credentials grant,
or an unsecured token for development.

Settings are Kafka's: the listener's ``oauthbearer.sasl.jaas.config`` is
``OAuthBearerLoginModule`` with ``clientId``, ``clientSecret`` and optionally ``scope``
(and ``extension_<name>`` SASL extensions); ``sasl.oauthbearer.token.endpoint.url``
names the endpoint, ``sasl.login.callback.handler.class`` Kafka's
``OAuthBearerLoginCallbackHandler``. The request is an HTTP POST of
``grant_type=client_credentials[&scope=..]`` with the client id and secret as HTTP Basic
credentials; the answer's ``access_token`` is the token, checked as Kafka's login
checks it (a JWT with ``exp``, the ``sasl.oauthbearer.sub.claim.name`` claim, and a
well-formed ``sasl.oauthbearer.scope.claim.name`` claim) but not verified: the brokers
that receive it do that.

Without a login callback handler and without a token endpoint, Kafka's unsecured login
applies: an unsigned token for ``unsecuredLoginStringClaim_sub`` (development only; the
receiving listener must name Kafka's unsecured validator to accept it).

A token is used until its refresh time (Kafka's ``sasl.login.refresh.*`` rule: a
fraction of its lifetime between ``window.factor`` and ``factor + jitter``, at least
``refresh.min.period.seconds`` after it was fetched and at least ``refresh.buffer.seconds``
before it expires, where the lifetime allows), then fetched again, in a worker thread so
the event loop never waits on the endpoint. A fetch that fails is retried with backoff
(``sasl.login.retry.backoff.ms`` doubling up to ``...max.ms``); meanwhile a token that
has not expired keeps being used.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import logging
import random
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from pykfk.security.oauth import TokenRejected, claim_scopes

log = logging.getLogger("pykfk.security")

SECURED_LOGIN_HANDLERS = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler",
)
UNSECURED_LOGIN_HANDLER = ("org.apache.kafka.common.security.oauthbearer.internals.unsecured."
                           "OAuthBearerUnsecuredLoginCallbackHandler")
MAX_RESPONSE_BYTES = 1024 * 1024
# HTTP statuses that another attempt will not change (Kafka's list of unretryable codes).
UNRETRYABLE_STATUSES = frozenset({400, 401, 402, 403, 404, 405, 406, 407, 409, 410, 411, 412, 413, 414, 415,
                                  501, 505})
DEFAULT_TIMEOUT_S = 10.0


class TokenEndpointError(OSError):
    """No usable token could be had from the identity provider."""

    def __init__(self, message: str, retryable: bool = True):
        super().__init__(message)
        self.retryable = retryable


@dataclasses.dataclass(frozen=True)
class ClientCredentials:
    """Where and as whom a token is asked for."""

    token_url: str
    client_id: str
    client_secret: str
    scope: str | None = None
    ssl_context: ssl.SSLContext | None = None
    connect_timeout_s: float | None = None
    read_timeout_s: float | None = None


def fetch_access_token(credentials: ClientCredentials) -> str:
    """One client-credentials request (blocking: run it in a worker thread)."""
    pair = f"{credentials.client_id}:{credentials.client_secret}".encode()
    form = {"grant_type": "client_credentials"}
    if credentials.scope and credentials.scope.strip():
        form["scope"] = credentials.scope.strip()
    request = urllib.request.Request(
        credentials.token_url, data=urllib.parse.urlencode(form).encode(), method="POST",
        headers={"Authorization": "Basic " + base64.b64encode(pair).decode(), "Accept": "application/json",
                 "Cache-Control": "no-cache", "Content-Type": "application/x-www-form-urlencoded"})
    timeout = credentials.read_timeout_s or credentials.connect_timeout_s or DEFAULT_TIMEOUT_S
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=credentials.ssl_context) as answer:
            body = answer.read(MAX_RESPONSE_BYTES + 1)
    except urllib.error.HTTPError as exc:
        detail = exc.read(1000).decode(errors="replace")
        raise TokenEndpointError(f"the token endpoint answered {exc.code}: {detail}",
                                 retryable=exc.code not in UNRETRYABLE_STATUSES) from None
    except (OSError, ValueError) as exc:
        raise TokenEndpointError(f"the token endpoint {credentials.token_url} cannot be reached: {exc}") from None
    if len(body) > MAX_RESPONSE_BYTES:
        raise TokenEndpointError("the token endpoint's answer is larger than 1 MiB")
    try:
        token = json.loads(body)["access_token"]
    except (ValueError, KeyError, TypeError):
        raise TokenEndpointError(f"the token endpoint's answer has no access_token: {body[:200]!r}") from None
    if not isinstance(token, str) or not token.strip():
        raise TokenEndpointError("the token endpoint's access_token is not a string")
    return token.strip()


@dataclasses.dataclass(frozen=True)
class LoginToken:
    """A token as the login uses it: times in ms since the epoch."""

    value: str
    principal: str
    expiry_ms: int
    start_ms: int | None


def check_login_token(token: str, sub_claim: str = "sub", scope_claim: str = "scope") -> LoginToken:
    """Kafka's checks of a token before a client uses it (its signature is the
    brokers' to check): a JWT with ``exp``, the principal claim, and scopes that are
    non-blank strings, none twice. Raises TokenEndpointError."""
    import jwt

    try:
        claims: dict[str, Any] = jwt.decode(token, options={"verify_signature": False, "verify_exp": False,
                                                            "verify_aud": False, "verify_iat": False,
                                                            "verify_nbf": False})
    except jwt.PyJWTError as exc:
        raise TokenEndpointError(f"the access token is not a JWT: {exc}", retryable=False) from None
    exp = claims.get("exp")
    if not isinstance(exp, (int, float)) or exp < 0:
        raise TokenEndpointError("the access token has no valid exp claim", retryable=False)
    principal = claims.get(sub_claim)
    if not isinstance(principal, str) or not principal.strip():
        raise TokenEndpointError(f"the access token has no {sub_claim!r} claim", retryable=False)
    try:
        claim_scopes(claims, scope_claim)
    except TokenRejected as exc:
        raise TokenEndpointError(str(exc), retryable=False) from None
    iat = claims.get("iat")
    start = int(iat * 1000) if isinstance(iat, (int, float)) and iat >= 0 else None
    return LoginToken(token, principal.strip(), int(exp * 1000), start)


def unsecured_token(sub: str, lifetime_s: int, sub_claim: str = "sub", scope: list[str] | None = None,
                    scope_claim: str = "scope", now_s: float | None = None) -> str:
    """An unsigned JWT (``alg: none``) as Kafka's unsecured login makes it."""
    now = time.time() if now_s is None else now_s

    def part(doc: Mapping[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(doc, separators=(",", ":")).encode()).decode().rstrip("=")

    claims: dict[str, Any] = {sub_claim: sub, "iat": int(now), "exp": int(now) + lifetime_s}
    if scope:
        claims[scope_claim] = scope
    return f"{part({'alg': 'none'})}.{part(claims)}."


@dataclasses.dataclass(frozen=True)
class RefreshSettings:
    """Kafka's ``sasl.login.refresh.*`` settings."""

    window_factor: float = 0.8
    window_jitter: float = 0.05
    min_period_s: int = 60
    buffer_s: int = 300


def refresh_time_ms(now_ms: int, start_ms: int | None, expiry_ms: int, settings: RefreshSettings,
                    rng: Callable[[], float] = random.random) -> int:
    """When a token fetched at ``now_ms`` should be replaced (Kafka's rule)."""
    if expiry_ms <= now_ms:
        return now_ms
    start = start_ms if start_ms is not None and start_ms <= now_ms else now_ms
    fraction = settings.window_factor + settings.window_jitter * rng()
    if now_ms + 1000 * (settings.min_period_s + settings.buffer_s) > expiry_ms:
        # Too short a lifetime for both the minimum period and the buffer: a fraction of what is left.
        return now_ms + int((expiry_ms - now_ms) * fraction)
    proposed = start + int((expiry_ms - start) * fraction)
    buffer_start = expiry_ms - settings.buffer_s * 1000
    if proposed > buffer_start:
        return buffer_start
    return max(proposed, now_ms + settings.min_period_s * 1000)


class BearerTokenSource:
    """The current token of a login: ``await token()`` gives one that has not expired,
    fetching a new one (off the loop) once the refresh time is reached. Loop-affine."""

    def __init__(self, fetch: Callable[[], str], *, sub_claim: str = "sub", scope_claim: str = "scope",
                 refresh: RefreshSettings | None = None, retry_backoff_ms: int = 100,
                 retry_backoff_max_ms: int = 10000, extensions: Mapping[str, str] | None = None):
        self._fetch = fetch
        self._sub_claim = sub_claim
        self._scope_claim = scope_claim
        self._refresh = refresh or RefreshSettings()
        self._backoff_ms = retry_backoff_ms
        self._backoff_max_ms = retry_backoff_max_ms
        self.extensions = dict(extensions or {})
        self.current: LoginToken | None = None
        self.refresh_at_ms = 0
        self._retry_at = 0.0  # monotonic: no new attempt before (after a failed refresh)
        self._lock: asyncio.Lock | None = None
        self.fetches = 0

    async def token(self) -> str:
        now_ms = int(time.time() * 1000)
        current = self.current
        if current is not None and now_ms < self.refresh_at_ms:
            return current.value
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            current = self.current
            now_ms = int(time.time() * 1000)
            if current is not None and now_ms < self.refresh_at_ms:
                return current.value  # another login fetched it meanwhile
            usable = current is not None and now_ms < current.expiry_ms
            if usable and time.monotonic() < self._retry_at:
                assert current is not None
                return current.value
            try:
                fresh = await self._fetch_with_retries(give_up_early=usable)
            except TokenEndpointError as exc:
                if not usable:
                    raise
                assert current is not None
                self._retry_at = time.monotonic() + self._backoff_max_ms / 1000
                log.warning("keeping the current OAUTHBEARER token (it expires in %d s): %s",
                            (current.expiry_ms - now_ms) // 1000, exc)
                return current.value
            self.current = fresh
            fetched_ms = int(time.time() * 1000)
            self.refresh_at_ms = refresh_time_ms(fetched_ms, fresh.start_ms, fresh.expiry_ms, self._refresh)
            return fresh.value

    async def _fetch_with_retries(self, give_up_early: bool) -> LoginToken:
        loop = asyncio.get_running_loop()
        backoff_ms = max(self._backoff_ms, 1)
        deadline = time.monotonic() + self._backoff_max_ms / 1000
        while True:
            try:
                text = await loop.run_in_executor(None, self._fetch)
                self.fetches += 1
                return check_login_token(text, self._sub_claim, self._scope_claim)
            except TokenEndpointError as exc:
                if not exc.retryable or give_up_early or time.monotonic() + backoff_ms / 1000 > deadline:
                    raise
                log.info("OAUTHBEARER token fetch failed, again in %d ms: %s", backoff_ms, exc)
            await asyncio.sleep(backoff_ms / 1000)
            backoff_ms = min(backoff_ms * 2, max(self._backoff_max_ms, 1))


def login_source(config: Any, listener: str, options: Mapping[str, str],
                 trust_pem: str | None = None) -> BearerTokenSource:
    """The token source of an OAUTHBEARER login on ``listener`` from the broker config and
    the listener's ``OAuthBearerLoginModule`` options. Raises ValueError (what is
    missing or wrong, for a ConfigError)."""
    mechanism = "OAUTHBEARER"
    handler = config.mechanism_setting(listener, mechanism, "sasl.login.callback.handler.class")
    url = config.mechanism_setting(listener, mechanism, "sasl.oauthbearer.token.endpoint.url")
    sub_claim = config["sasl.oauthbearer.sub.claim.name"]
    scope_claim = config["sasl.oauthbearer.scope.claim.name"]
    extensions = {k[len("extension_"):]: v for k, v in options.items() if k.startswith("extension_")}
    refresh = RefreshSettings(config["sasl.login.refresh.window.factor"], config["sasl.login.refresh.window.jitter"],
                              config["sasl.login.refresh.min.period.seconds"],
                              config["sasl.login.refresh.buffer.seconds"])
    if handler in SECURED_LOGIN_HANDLERS or (handler is None and url):
        if not url:
            raise ValueError("sasl.oauthbearer.token.endpoint.url is needed to get tokens")
        if not options.get("clientId") or not options.get("clientSecret"):
            raise ValueError("OAuthBearerLoginModule needs clientId and clientSecret")
        context = None
        if url.startswith("https:"):
            context = ssl.create_default_context(cafile=options.get("ssl.truststore.location") or trust_pem)
        connect = config["sasl.login.connect.timeout.ms"]
        read = config["sasl.login.read.timeout.ms"]
        credentials = ClientCredentials(url, options["clientId"], options["clientSecret"], options.get("scope"),
                                        context, connect / 1000 if connect else None, read / 1000 if read else None)
        return BearerTokenSource(lambda: fetch_access_token(credentials), sub_claim=sub_claim,
                                 scope_claim=scope_claim, refresh=refresh,
                                 retry_backoff_ms=config["sasl.login.retry.backoff.ms"],
                                 retry_backoff_max_ms=config["sasl.login.retry.backoff.max.ms"],
                                 extensions=extensions)
    if handler not in (None, UNSECURED_LOGIN_HANDLER):
        raise ValueError(f"unknown OAUTHBEARER login callback handler {handler}")
    sub = options.get("unsecuredLoginStringClaim_sub")
    if not sub:
        raise ValueError("OAuthBearerLoginModule needs clientId and clientSecret with "
                         "sasl.oauthbearer.token.endpoint.url (or, for unsecured development tokens, "
                         "unsecuredLoginStringClaim_sub)")
    principal_claim = options.get("unsecuredLoginPrincipalClaimName", "sub")
    scope_name = options.get("unsecuredLoginScopeClaimName", "scope")
    scope = options.get("unsecuredLoginListClaim_" + scope_name)
    try:
        lifetime = int(options.get("unsecuredLoginLifetimeSeconds", "3600"))
    except ValueError:
        raise ValueError("unsecuredLoginLifetimeSeconds must be a number of seconds") from None
    scopes = [s for s in scope[1:].split(scope[0])] if scope else None  # Kafka: the first character separates

    def make() -> str:
        return unsecured_token(sub, lifetime, principal_claim, scopes, scope_name)

    return BearerTokenSource(make, sub_claim=principal_claim, scope_claim=scope_name, refresh=refresh,
                             extensions=extensions)


def client_credentials_from_properties(props: Mapping[str, str]) -> ClientCredentials:
    """A client's OAUTHBEARER client credentials from its properties, in Kafka's
    spelling (``sasl.oauthbearer.token.endpoint.url`` and the ``OAuthBearerLoginModule``
    options clientId, clientSecret, scope of ``sasl.jaas.config``, or Kafka 4.1's
    ``sasl.oauthbearer.client.credentials.client.id``/``.client.secret`` and
    ``sasl.oauthbearer.scope``) or librdkafka's (``sasl.oauthbearer.client.id``,
    ``.client.secret``, ``.scope``, ``https.ca.location``). Raises ValueError."""
    from pykfk.security.jaas import JaasError, parse_jaas

    try:
        options = parse_jaas(props["sasl.jaas.config"]).options if props.get("sasl.jaas.config") else {}
    except JaasError as exc:
        raise ValueError(f"sasl.jaas.config: {exc}") from None
    url = props.get("sasl.oauthbearer.token.endpoint.url")
    client_id = (options.get("clientId") or props.get("sasl.oauthbearer.client.credentials.client.id")
                 or props.get("sasl.oauthbearer.client.id"))
    secret = (options.get("clientSecret") or props.get("sasl.oauthbearer.client.credentials.client.secret")
              or props.get("sasl.oauthbearer.client.secret"))
    if not url:
        raise ValueError("sasl.oauthbearer.token.endpoint.url: OAUTHBEARER logins need the identity provider's "
                         "token endpoint")
    if not client_id or not secret:
        raise ValueError("sasl.jaas.config: OAUTHBEARER logins need clientId and clientSecret "
                         "(OAuthBearerLoginModule options)")
    scope = options.get("scope") or props.get("sasl.oauthbearer.scope")
    context = None
    if url.startswith("https:"):
        cafile = (options.get("ssl.truststore.location") or props.get("https.ca.location")
                  or props.get("ssl.truststore.location") or props.get("ssl.ca.location"))
        context = ssl.create_default_context(cafile=cafile or None)
    return ClientCredentials(url, client_id, secret, scope, context)


_client_tokens: dict[ClientCredentials, LoginToken] = {}


def client_bearer_token(credentials: ClientCredentials, sub_claim: str = "sub", scope_claim: str = "scope") -> str:
    """A token for a command-line client (blocking): the one fetched before while more
    than a tenth of its lifetime (at least 5 s) is left, else a new one."""
    now_ms = int(time.time() * 1000)
    known = _client_tokens.get(credentials)
    if known is not None:
        margin = max(5000, (known.expiry_ms - (known.start_ms or now_ms)) // 10)
        if now_ms + margin < known.expiry_ms:
            return known.value
    token = check_login_token(fetch_access_token(credentials), sub_claim, scope_claim)
    _client_tokens[credentials] = token
    return token.value
