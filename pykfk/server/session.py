"""Per-listener security and per-connection sessions.

``ListenerSecurity`` is what a listener asks of its clients, built once at start from the
broker config: a TLS context (SSL, SASL_SSL), the SASL mechanisms and PLAIN users
(SASL_PLAINTEXT, SASL_SSL), re-authentication and failed-login settings.

``Session`` is one connection's state: its principal and, on a SASL listener, the login
in progress. Until the login completes only ApiVersions, SaslHandshake and
SaslAuthenticate are served (Kafka's ``SaslServerAuthenticator``); any other request
closes the connection. With ``connections.max.reauth.ms`` a session expires unless the
client logs in again on the same connection (KIP-368), and a request after expiry closes
it.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from typing import Any

from pykfk.clock import SYSTEM_CLOCK, Clock
from pykfk.config import BrokerConfig, ConfigError, Listener
from pykfk.security.jaas import JaasError, parse_jaas
from pykfk.security.kerberos import MECHANISM as GSSAPI
from pykfk.security.kerberos import GssapiAcceptor, KerberosError, KerberosNameMapper
from pykfk.security.oauth import MECHANISM as OAUTHBEARER
from pykfk.security.oauth import SECURED_VALIDATORS, UNSECURED_VALIDATOR, JwksKeys, TokenValidator
from pykfk.security.sasl import SUPPORTED_MECHANISMS, CredentialLookup, SaslServer, TokenLookup
from pykfk.security.tls import PrincipalMapper, server_context, subject_dn

ANONYMOUS = "User:ANONYMOUS"
SASL_HANDSHAKE_KEY, API_VERSIONS_KEY, SASL_AUTHENTICATE_KEY = 17, 18, 36
SASL_LOGIN_KEYS = frozenset({SASL_HANDSHAKE_KEY, API_VERSIONS_KEY, SASL_AUTHENTICATE_KEY})


class ListenerSecurity:
    """What one listener asks of its clients. Raises ConfigError for unusable settings."""

    def __init__(self, listener: Listener, config: BrokerConfig | None = None):
        self.listener = listener
        self.name = listener.name
        self.ssl_context: ssl.SSLContext | None = None
        self.principal_mapper: PrincipalMapper | None = None
        self.mechanisms: list[str] = []
        self.plain_users: dict[str, str] = {}
        self.reauth_ms = 0
        self.failed_login_delay_s = 0.1
        self.tokens_without_extension = False
        self.bearer_validator: TokenValidator | None = None
        self.kerberos: GssapiAcceptor | None = None
        if config is None:
            if listener.uses_tls or listener.uses_sasl:
                raise ValueError(f"listener {listener.name} needs the broker config")
            return
        if listener.uses_tls:
            self.ssl_context = server_context(config, listener.name)
            self.principal_mapper = PrincipalMapper(config.listener_setting(listener.name, "ssl.principal.mapping.rules"))
        if listener.uses_sasl:
            self._configure_sasl(config)

    def _configure_sasl(self, config: BrokerConfig) -> None:
        name = self.listener.name
        self.mechanisms = [m.upper() for m in config.listener_setting(name, "sasl.enabled.mechanisms")]
        unsupported = [m for m in self.mechanisms if m not in SUPPORTED_MECHANISMS]
        if unsupported or not self.mechanisms:
            raise ConfigError("sasl.enabled.mechanisms",
                              f"listener {name}: supported mechanisms are {', '.join(SUPPORTED_MECHANISMS)}"
                              + (f", not {', '.join(unsupported)}" if unsupported else ""))
        if "PLAIN" in self.mechanisms:
            jaas = config.jaas_config(name, "PLAIN")
            if jaas:
                try:
                    self.plain_users = parse_jaas(jaas).plain_users
                except JaasError as exc:
                    raise ConfigError(f"listener.name.{name.lower()}.plain.sasl.jaas.config", str(exc)) from None
        self.reauth_ms = config.listener_setting(name, "connections.max.reauth.ms")
        self.failed_login_delay_s = config["connection.failed.authentication.delay.ms"] / 1000
        self.tokens_without_extension = config["delegation.token.scram.without.extension"]
        if OAUTHBEARER in self.mechanisms:
            self.bearer_validator = _bearer_validator(config, name)
        if GSSAPI in self.mechanisms:
            self.kerberos = _kerberos_acceptor(config, name)

    def principal_of(self, peercert: dict[str, object] | None) -> str:
        """The principal of a TLS client: its certificate's subject mapped by the rules;
        ANONYMOUS without a certificate."""
        if not peercert or self.principal_mapper is None:
            return ANONYMOUS
        return "User:" + self.principal_mapper.map(subject_dn(peercert))


def _bearer_validator(config: BrokerConfig, listener: str) -> TokenValidator:
    """OAUTHBEARER's validator on ``listener``: against the JWKS of
    ``sasl.oauthbearer.jwks.endpoint.url``, or unsecured tokens where Kafka's unsecured
    validator is named (never by default)."""
    handler = config.mechanism_setting(listener, OAUTHBEARER, "sasl.server.callback.handler.class")

    def setting(name: str) -> Any:  # per listener and mechanism, as Kafka reads them
        return config.mechanism_setting(listener, OAUTHBEARER, name)

    url = setting("sasl.oauthbearer.jwks.endpoint.url")
    key = f"listener.name.{listener.lower()}.oauthbearer.sasl.server.callback.handler.class"
    if handler == UNSECURED_VALIDATOR:
        return _unsecured_validator(config, listener)
    if handler not in (None, *SECURED_VALIDATORS):
        raise ConfigError(key, f"unknown OAUTHBEARER validator {handler}")
    if not url:
        raise ConfigError("sasl.oauthbearer.jwks.endpoint.url",
                          f"listener {listener}: OAUTHBEARER needs the identity provider's JWKS (unsecured tokens, "
                          f"for development only, need {key}={UNSECURED_VALIDATOR})")
    context = None
    if url.startswith("https:"):
        cafile = config["ssl.truststore.location"] if config["ssl.truststore.type"] == "PEM" else None
        context = ssl.create_default_context(cafile=cafile)
    keys = JwksKeys(url, setting("sasl.oauthbearer.jwks.endpoint.refresh.ms"),
                    setting("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms"), context)
    return TokenValidator(keys, audience=setting("sasl.oauthbearer.expected.audience"),
                          issuer=setting("sasl.oauthbearer.expected.issuer"),
                          sub_claim=setting("sasl.oauthbearer.sub.claim.name"),
                          clock_skew_s=setting("sasl.oauthbearer.clock.skew.seconds"),
                          scope_claim=setting("sasl.oauthbearer.scope.claim.name"))


def _unsecured_validator(config: BrokerConfig, listener: str) -> TokenValidator:
    """Kafka's unsecured validator with its JAAS options (``unsecuredValidator*`` of the
    listener's oauthbearer.sasl.jaas.config): principal and scope claim names, the scopes
    a token must have (space-separated), the clock skew in ms."""
    text = config.jaas_config(listener, OAUTHBEARER)
    key = f"listener.name.{listener.lower()}.oauthbearer.sasl.jaas.config"
    try:
        options = parse_jaas(text).options if text else {}
        skew_ms = int(options.get("unsecuredValidatorAllowableClockSkewMs", "0"))
    except (JaasError, ValueError) as exc:
        raise ConfigError(key, str(exc)) from None
    return TokenValidator(None, unsecured=True, clock_skew_s=skew_ms // 1000,
                          sub_claim=options.get("unsecuredValidatorPrincipalClaimName", "sub"),
                          scope_claim=options.get("unsecuredValidatorScopeClaimName", "scope"),
                          required_scope=options.get("unsecuredValidatorRequiredScope", "").split())


def _kerberos_acceptor(config: BrokerConfig, listener: str) -> GssapiAcceptor:
    """The broker's Kerberos key on ``listener``: ``keyTab`` and ``principal`` of the
    listener's GSSAPI JAAS settings (Krb5LoginModule)."""
    key = f"listener.name.{listener.lower()}.gssapi.sasl.jaas.config"
    text = config.jaas_config(listener, GSSAPI)
    try:
        options = parse_jaas(text).options if text else {}
    except JaasError as exc:
        raise ConfigError(key, str(exc)) from None
    if not config["sasl.kerberos.service.name"]:
        raise ConfigError("sasl.kerberos.service.name", f"listener {listener}: GSSAPI needs the brokers' service name")
    if not options.get("keyTab") or not options.get("principal"):
        raise ConfigError(key, f"listener {listener}: GSSAPI needs Krb5LoginModule with keyTab and principal")
    try:
        mapper = KerberosNameMapper(config["sasl.kerberos.principal.to.local.rules"])
    except KerberosError as exc:
        raise ConfigError("sasl.kerberos.principal.to.local.rules", str(exc)) from None
    try:
        return GssapiAcceptor(options["principal"], options["keyTab"], mapper)
    except ImportError:
        raise ConfigError(key, "GSSAPI needs python-gssapi (pip install gssapi)") from None
    except Exception as exc:  # noqa: BLE001 - gssapi's errors: no such keytab, no key for the principal
        raise ConfigError(key, f"the broker's Kerberos key cannot be used: {exc}") from None


PLAINTEXT_SECURITY = ListenerSecurity(Listener("PLAINTEXT", "", 0))


class Session:
    """One connection's security state. Loop-affine."""

    __slots__ = ("authenticated", "client_host", "client_ip", "client_software", "clock", "expires_at", "gated",
                 "handshake_version", "on_failed_login", "on_throttle", "principal", "sasl", "security",
                 "token_authenticated", "token_end", "token_ends")

    def __init__(self, security: ListenerSecurity, client_host: str, principal: str = ANONYMOUS,
                 clock: Clock = SYSTEM_CLOCK):
        self.security = security
        self.clock = clock  # session lifetimes (KIP-368) and token ends
        self.client_host = client_host
        self.client_ip = client_host.rpartition(":")[0] or client_host  # ACL bindings name hosts by address
        self.principal = principal
        self.token_authenticated = False  # logged in with a delegation token
        # Where a delegation token login looks up when its token stops working (the
        # metadata store's delegation_token_end), and the token's id.
        self.token_ends: Callable[[str], int | None] | None = None
        self.token_end = ""
        self.authenticated = not security.listener.uses_sasl
        # Dispatch looks at the session only while this is set: before a SASL login
        # completes, and while a login can expire.
        self.gated = not self.authenticated
        self.sasl: SaslServer | None = None
        self.handshake_version = -1
        self.expires_at = 0.0  # monotonic seconds; 0: never
        self.on_failed_login: Callable[[], None] | None = None
        self.on_throttle: Callable[[float], None] | None = None  # mute the connection this many seconds
        self.client_software = ("", "")  # name and version the client gave in ApiVersions v3+

    @property
    def user(self) -> str:
        """The principal's name, as quotas know users."""
        return self.principal.partition(":")[2]

    def throttle(self, seconds: float) -> None:
        if self.on_throttle is not None:
            self.on_throttle(seconds)

    @property
    def listener_name(self) -> str:
        return self.security.name

    @property
    def expects_raw_token(self) -> bool:
        """After a v0 SaslHandshake the tokens come as bare frames, not in requests."""
        return self.sasl is not None and self.handshake_version == 0 and not self.sasl.complete

    def start_login(self, mechanism: str, handshake_version: int, lookup: CredentialLookup,
                    token_lookup: TokenLookup | None = None,
                    token_ends: Callable[[str], int | None] | None = None) -> None:
        self.token_ends = token_ends
        validator = self.security.bearer_validator
        self.sasl = SaslServer(mechanism, self.security.plain_users, lookup, token_lookup,
                               self.security.tokens_without_extension,
                               None if validator is None else validator.validate, self.security.kerberos)
        self.handshake_version = handshake_version

    def login_complete(self) -> int:
        """Take the login's user as principal; returns the session lifetime in ms (0:
        no expiry). A re-login must be by the same user. A session of a delegation or
        bearer token ends when the token expires (sooner with
        ``connections.max.reauth.ms``): the client must log in again (KIP-368), which an
        expired token cannot."""
        assert self.sasl is not None and self.sasl.complete
        principal = "User:" + self.sasl.user
        if self.authenticated and principal != self.principal:
            raise PermissionError("re-authentication must keep the principal")
        self.principal = principal
        self.authenticated = True
        self.token_authenticated = bool(self.sasl.delegation_token)
        self.token_end = self.sasl.delegation_token
        lifetime_ms = self.security.reauth_ms
        if self.sasl.credential_expiry_ms is not None:
            token_left_ms = max(1, self.sasl.credential_expiry_ms - self.clock.time_ms())
            lifetime_ms = min(lifetime_ms, token_left_ms) if lifetime_ms else token_left_ms
        self.expires_at = self.clock.monotonic() + lifetime_ms / 1000 if lifetime_ms else 0.0
        self.gated = bool(lifetime_ms)
        return lifetime_ms

    def login_failed(self) -> None:
        if self.on_failed_login is not None:
            self.on_failed_login()

    def expired(self) -> bool:
        """The session is over: its lifetime is past, or the delegation token it logged
        in with was expired or removed since (on any broker)."""
        if self.expires_at and self.clock.monotonic() >= self.expires_at:
            return True
        if self.token_end and self.token_ends is not None:
            end = self.token_ends(self.token_end)
            return end is None or end < self.clock.time_ms()
        return False
