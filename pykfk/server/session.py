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
import time
from collections.abc import Callable

from pykfk.config import BrokerConfig, ConfigError, Listener
from pykfk.security.jaas import JaasError, parse_jaas
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

    def principal_of(self, peercert: dict[str, object] | None) -> str:
        """The principal of a TLS client: its certificate's subject mapped by the rules;
        ANONYMOUS without a certificate."""
        if not peercert or self.principal_mapper is None:
            return ANONYMOUS
        return "User:" + self.principal_mapper.map(subject_dn(peercert))


PLAINTEXT_SECURITY = ListenerSecurity(Listener("PLAINTEXT", "", 0))


class Session:
    """One connection's security state. Loop-affine."""

    __slots__ = ("authenticated", "client_host", "client_ip", "expires_at", "gated", "handshake_version",
                 "on_failed_login", "on_throttle", "principal", "sasl", "security", "token_authenticated")

    def __init__(self, security: ListenerSecurity, client_host: str, principal: str = ANONYMOUS):
        self.security = security
        self.client_host = client_host
        self.client_ip = client_host.rpartition(":")[0] or client_host  # ACL bindings name hosts by address
        self.principal = principal
        self.token_authenticated = False  # logged in with a delegation token
        self.authenticated = not security.listener.uses_sasl
        # Dispatch looks at the session only while this is set: before a SASL login
        # completes, and while a login can expire.
        self.gated = not self.authenticated
        self.sasl: SaslServer | None = None
        self.handshake_version = -1
        self.expires_at = 0.0  # monotonic seconds; 0: never
        self.on_failed_login: Callable[[], None] | None = None
        self.on_throttle: Callable[[float], None] | None = None  # mute the connection this many seconds

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
                    token_lookup: TokenLookup | None = None) -> None:
        self.sasl = SaslServer(mechanism, self.security.plain_users, lookup, token_lookup,
                               self.security.tokens_without_extension)
        self.handshake_version = handshake_version

    def login_complete(self) -> int:
        """Take the login's user as principal; returns the session lifetime in ms (0:
        no expiry). A re-login must be by the same user. A delegation token's session
        ends when the token expires (sooner with ``connections.max.reauth.ms``): the
        client must log in again, which an expired token cannot."""
        assert self.sasl is not None and self.sasl.complete
        principal = "User:" + self.sasl.user
        if self.authenticated and principal != self.principal:
            raise PermissionError("re-authentication must keep the principal")
        self.principal = principal
        self.authenticated = True
        self.token_authenticated = self.sasl.token_expiry_ms is not None
        lifetime_ms = self.security.reauth_ms
        if self.sasl.token_expiry_ms is not None:
            token_left_ms = max(1, self.sasl.token_expiry_ms - int(time.time() * 1000))
            lifetime_ms = min(lifetime_ms, token_left_ms) if lifetime_ms else token_left_ms
        self.expires_at = time.monotonic() + lifetime_ms / 1000 if lifetime_ms else 0.0
        self.gated = bool(lifetime_ms)
        return lifetime_ms

    def login_failed(self) -> None:
        if self.on_failed_login is not None:
            self.on_failed_login()

    def expired(self) -> bool:
        return bool(self.expires_at) and time.monotonic() >= self.expires_at
