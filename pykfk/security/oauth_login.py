"""A broker's own OAUTHBEARER login (KIP-255, KIP-768, KIP-1139): the token it presents to
other brokers, from the identity provider's token endpoint, or an unsecured token for
development.

Settings are Kafka's, each read per listener and mechanism as Kafka reads them
(``listener.name.<l>.oauthbearer.<setting>``, then ``listener.name.<l>.<setting>``, then
``<setting>``). ``sasl.oauthbearer.token.endpoint.url`` names the endpoint,
``sasl.login.callback.handler.class`` Kafka's ``OAuthBearerLoginCallbackHandler`` and
``sasl.oauthbearer.jwt.retriever.class`` the grant:

- ``DefaultJwtRetriever`` (the default) and ``ClientCredentialsJwtRetriever``: an HTTP POST
  of ``grant_type=client_credentials[&scope=..]`` with the client id and secret as HTTP
  Basic credentials (URL-encoded first with ``sasl.oauthbearer.header.urlencode``), from
  ``sasl.oauthbearer.client.credentials.client.id``/``.client.secret`` and
  ``sasl.oauthbearer.scope``, else the ``OAuthBearerLoginModule`` options clientId,
  clientSecret and scope. DefaultJwtRetriever with a ``file:`` endpoint reads the token
  from that file, as ``FileJwtRetriever`` does.
- ``JwtBearerJwtRetriever``: ``grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer`` with
  an assertion (RFC 7523) signed with ``sasl.oauthbearer.assertion.private.key.file``
  (RS256 or ES256) for each request, its claims from ``sasl.oauthbearer.assertion.claim.*``
  over an optional template file, or read from ``sasl.oauthbearer.assertion.file``.

An https:// endpoint is trusted as the login's JAAS options say (``ssl.truststore.location``,
``.type``, ``.password``, ``.certificates``, ``ssl.endpoint.identification.algorithm`` and a
key store for a client certificate: Kafka reads them there), else as the broker's own PEM
trust store, else by the system's CAs. The answer's ``access_token`` is the token, checked
as Kafka's login checks it (a JWT with ``exp``, the ``sasl.oauthbearer.sub.claim.name``
claim, and a well-formed ``sasl.oauthbearer.scope.claim.name`` claim) but not verified: the
brokers that receive it do that. ``extension_<name>`` JAAS options are SASL extensions.

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
import os
import random
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
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
    """Where and as whom a token is asked for (the client-credentials grant)."""

    token_url: str
    client_id: str
    client_secret: str
    scope: str | None = None
    ssl_context: ssl.SSLContext | None = None
    connect_timeout_s: float | None = None
    read_timeout_s: float | None = None
    urlencode: bool = False  # sasl.oauthbearer.header.urlencode


def fetch_access_token(credentials: ClientCredentials) -> str:
    """One client-credentials request (blocking: run it in a worker thread)."""
    client_id, secret = credentials.client_id, credentials.client_secret
    if credentials.urlencode:
        client_id, secret = urllib.parse.quote(client_id, safe=""), urllib.parse.quote(secret, safe="")
    pair = f"{client_id}:{secret}".encode()
    form = {"grant_type": "client_credentials"}
    if credentials.scope and credentials.scope.strip():
        form["scope"] = credentials.scope.strip()
    return _post_for_token(credentials.token_url, form, {"Authorization": "Basic " + base64.b64encode(pair).decode()},
                           credentials.ssl_context, credentials.read_timeout_s or credentials.connect_timeout_s)


@dataclasses.dataclass(frozen=True)
class JwtBearerGrant:
    """Where a token is asked for with a signed assertion (RFC 7523, KIP-1139)."""

    token_url: str
    assertion: AssertionSettings
    scope: str | None = None
    ssl_context: ssl.SSLContext | None = None
    connect_timeout_s: float | None = None
    read_timeout_s: float | None = None


def fetch_jwt_bearer_token(grant: JwtBearerGrant) -> str:
    """One jwt-bearer request with a fresh assertion (blocking)."""
    form = {"grant_type": JWT_BEARER_GRANT, "assertion": make_assertion(grant.assertion)}
    if grant.scope and grant.scope.strip():
        form["scope"] = grant.scope.strip()
    return _post_for_token(grant.token_url, form, {}, grant.ssl_context,
                           grant.read_timeout_s or grant.connect_timeout_s)


def _post_for_token(url: str, form: Mapping[str, str], headers: Mapping[str, str],
                    context: ssl.SSLContext | None, timeout: float | None) -> str:
    request = urllib.request.Request(
        url, data=urllib.parse.urlencode(form).encode(), method="POST",
        headers={**headers, "Accept": "application/json", "Cache-Control": "no-cache",
                 "Content-Type": "application/x-www-form-urlencoded"})
    try:
        with urllib.request.urlopen(request, timeout=timeout or DEFAULT_TIMEOUT_S, context=context) as answer:
            body = answer.read(MAX_RESPONSE_BYTES + 1)
    except urllib.error.HTTPError as exc:
        detail = exc.read(1000).decode(errors="replace")
        raise TokenEndpointError(f"the token endpoint answered {exc.code}: {detail}",
                                 retryable=exc.code not in UNRETRYABLE_STATUSES) from None
    except (OSError, ValueError) as exc:
        raise TokenEndpointError(f"the token endpoint {url} cannot be reached: {exc}") from None
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


CLIENT_CREDENTIALS_RETRIEVER = "org.apache.kafka.common.security.oauthbearer.ClientCredentialsJwtRetriever"
JWT_BEARER_RETRIEVER = "org.apache.kafka.common.security.oauthbearer.JwtBearerJwtRetriever"
FILE_RETRIEVER = "org.apache.kafka.common.security.oauthbearer.FileJwtRetriever"
JWT_BEARER_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"


@dataclasses.dataclass(frozen=True)
class AssertionSettings:
    """How the jwt-bearer grant's assertion is made (Kafka's ``sasl.oauthbearer.assertion.*``):
    read from ``file`` for each request, or signed here with ``private_key_file``."""

    file: str | None = None
    private_key_file: str | None = None
    passphrase: str | None = None
    algorithm: str = "RS256"
    template_file: str | None = None
    iss: str | None = None
    sub: str | None = None
    aud: str | None = None
    exp_s: int = 300
    nbf_s: int = 60
    jti: bool = False


def make_assertion(settings: AssertionSettings, now_s: float | None = None) -> str:
    """One assertion (RFC 7523): the template file's header and payload, under the
    configured iss/sub/aud, under iat, exp and nbf (and a random jti where asked for).
    Raises TokenEndpointError (not retryable) for a key or file that cannot be used."""
    import jwt
    from cryptography.hazmat.primitives import serialization

    if settings.file:
        try:
            with open(settings.file, encoding="utf-8") as handle:
                return handle.read().strip()
        except OSError as exc:
            raise TokenEndpointError(f"sasl.oauthbearer.assertion.file: {exc}", retryable=False) from None
    if not settings.private_key_file:
        raise TokenEndpointError("the jwt-bearer grant needs sasl.oauthbearer.assertion.private.key.file "
                                 "(or sasl.oauthbearer.assertion.file)", retryable=False)
    header: dict[str, Any] = {}
    payload: dict[str, Any] = {}
    try:
        if settings.template_file:
            with open(settings.template_file, encoding="utf-8") as handle:
                template = json.load(handle)
            header = dict(template.get("header") or {})
            payload = dict(template.get("payload") or {})
        with open(settings.private_key_file, "rb") as handle:
            passphrase = settings.passphrase.encode() if settings.passphrase else None
            key = serialization.load_pem_private_key(handle.read(), password=passphrase)
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        raise TokenEndpointError(f"the jwt-bearer assertion cannot be made: {exc}", retryable=False) from None
    now = int(time.time() if now_s is None else now_s)
    payload.update({name: value for name, value in (("iss", settings.iss), ("sub", settings.sub),
                                                   ("aud", settings.aud)) if value})
    payload.update(iat=now, exp=now + settings.exp_s, nbf=now - settings.nbf_s)
    if settings.jti:
        payload["jti"] = uuid.uuid4().hex
    try:
        return jwt.encode(payload, key, algorithm=settings.algorithm, headers=header or None)  # type: ignore[arg-type]
    except (jwt.PyJWTError, ValueError, TypeError) as exc:
        raise TokenEndpointError(f"the jwt-bearer assertion cannot be signed with {settings.algorithm}: {exc}",
                                 retryable=False) from None


def login_source(config: Any, listener: str, options: Mapping[str, str],
                 trust_pem: str | None = None) -> BearerTokenSource:
    """The token source of an OAUTHBEARER login on ``listener`` from the broker config
    (each setting per listener and mechanism as Kafka reads them) and the listener's
    ``OAuthBearerLoginModule`` options. An https:// token endpoint is trusted as the
    options' ``ssl.truststore.*`` say (Kafka's place for them), else by ``trust_pem`` (the
    broker's own PEM trust store), else by the system's CAs.
    Raises ValueError (what is missing or wrong, for a ConfigError)."""
    from pykfk.security.tls import https_client_context

    def setting(name: str) -> Any:
        return config.mechanism_setting(listener, "OAUTHBEARER", name)

    def trust(name: str) -> Any:
        return {"ssl.truststore.location": trust_pem, "ssl.truststore.type": "PEM"}.get(name)

    handler = setting("sasl.login.callback.handler.class")
    url = setting("sasl.oauthbearer.token.endpoint.url")
    retriever = setting("sasl.oauthbearer.jwt.retriever.class")
    sub_claim = setting("sasl.oauthbearer.sub.claim.name")
    scope_claim = setting("sasl.oauthbearer.scope.claim.name")
    extensions = {k[len("extension_"):]: v for k, v in options.items() if k.startswith("extension_")}
    refresh = RefreshSettings(setting("sasl.login.refresh.window.factor"), setting("sasl.login.refresh.window.jitter"),
                              setting("sasl.login.refresh.min.period.seconds"),
                              setting("sasl.login.refresh.buffer.seconds"))
    if handler in SECURED_LOGIN_HANDLERS or (handler is None and url):
        if not url:
            raise ValueError("sasl.oauthbearer.token.endpoint.url is needed to get tokens")
        fetch = _secured_fetch(setting, retriever, url, options, trust if trust_pem else None, https_client_context)
        return BearerTokenSource(fetch, sub_claim=sub_claim, scope_claim=scope_claim, refresh=refresh,
                                 retry_backoff_ms=setting("sasl.login.retry.backoff.ms"),
                                 retry_backoff_max_ms=setting("sasl.login.retry.backoff.max.ms"),
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


def _secured_fetch(setting: Callable[[str], Any], retriever: str, url: str, options: Mapping[str, str],
                   trust: Callable[[str], Any] | None, context_of: Callable[..., ssl.SSLContext]
                   ) -> Callable[[], str]:
    """What the configured JWT retriever does, as one blocking call."""
    if retriever == FILE_RETRIEVER or (url.startswith("file:") and retriever != JWT_BEARER_RETRIEVER):
        path = urllib.request.url2pathname(urllib.parse.urlparse(url).path)
        return lambda: read_token_file(path)
    try:
        context = context_of(options, trust) if url.startswith("https:") else None
    except OSError as exc:  # ConfigError: the JAAS ssl.* options name a store that cannot be read
        raise ValueError(str(exc)) from None
    connect, read = setting("sasl.login.connect.timeout.ms"), setting("sasl.login.read.timeout.ms")
    connect_s, read_s = (connect / 1000 if connect else None), (read / 1000 if read else None)
    scope = setting("sasl.oauthbearer.scope") or options.get("scope")
    if retriever == JWT_BEARER_RETRIEVER:
        assertion = AssertionSettings(
            setting("sasl.oauthbearer.assertion.file"), setting("sasl.oauthbearer.assertion.private.key.file"),
            setting("sasl.oauthbearer.assertion.private.key.passphrase"),
            setting("sasl.oauthbearer.assertion.algorithm"), setting("sasl.oauthbearer.assertion.template.file"),
            setting("sasl.oauthbearer.assertion.claim.iss"), setting("sasl.oauthbearer.assertion.claim.sub"),
            setting("sasl.oauthbearer.assertion.claim.aud"), setting("sasl.oauthbearer.assertion.claim.exp.seconds"),
            setting("sasl.oauthbearer.assertion.claim.nbf.seconds"),
            setting("sasl.oauthbearer.assertion.claim.jti.include"))
        paths: tuple[str | None, ...] = (assertion.file or assertion.private_key_file, assertion.template_file)
        for named in paths:
            if named is not None and not os.path.isfile(named):
                raise ValueError(f"JwtBearerJwtRetriever: {named} is not a readable file")
        if not (assertion.file or assertion.private_key_file):
            raise ValueError("JwtBearerJwtRetriever needs sasl.oauthbearer.assertion.private.key.file "
                             "(or sasl.oauthbearer.assertion.file)")
        try:
            make_assertion(assertion)  # a key that cannot sign fails at start, not at the first login
        except TokenEndpointError as exc:
            raise ValueError(str(exc)) from None
        grant = JwtBearerGrant(url, assertion, scope, context, connect_s, read_s)
        return lambda: fetch_jwt_bearer_token(grant)
    # Kafka 4.1's settings first, then the JAAS options (KIP-1139).
    client_id = setting("sasl.oauthbearer.client.credentials.client.id") or options.get("clientId")
    secret = setting("sasl.oauthbearer.client.credentials.client.secret") or options.get("clientSecret")
    if not client_id or not secret:
        raise ValueError("the client-credentials grant needs sasl.oauthbearer.client.credentials.client.id and "
                         ".client.secret (or OAuthBearerLoginModule's clientId and clientSecret)")
    credentials = ClientCredentials(url, client_id, secret, scope, context, connect_s, read_s,
                                    bool(setting("sasl.oauthbearer.header.urlencode")))
    return lambda: fetch_access_token(credentials)


def read_token_file(path: str) -> str:
    """The token of Kafka's FileJwtRetriever: a file's content, read again at each refresh."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read(MAX_RESPONSE_BYTES).strip()
    except OSError as exc:
        raise TokenEndpointError(f"the token file cannot be read: {exc}") from None


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
    # Kafka 4.1's settings over the JAAS options (KIP-1139), then librdkafka's.
    client_id = (props.get("sasl.oauthbearer.client.credentials.client.id") or options.get("clientId")
                 or props.get("sasl.oauthbearer.client.id"))
    secret = (props.get("sasl.oauthbearer.client.credentials.client.secret") or options.get("clientSecret")
              or props.get("sasl.oauthbearer.client.secret"))
    if not url:
        raise ValueError("sasl.oauthbearer.token.endpoint.url: OAUTHBEARER logins need the identity provider's "
                         "token endpoint")
    if not client_id or not secret:
        raise ValueError("sasl.jaas.config: OAUTHBEARER logins need clientId and clientSecret "
                         "(OAuthBearerLoginModule options)")
    scope = props.get("sasl.oauthbearer.scope") or options.get("scope")
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
