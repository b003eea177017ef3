"""TLS from Kafka's ``ssl.*`` settings, and principals from client certificates.

Key stores: PEM (``ssl.keystore.location`` naming one file with the private key and the
certificate chain, or the inline ``ssl.keystore.key`` / ``ssl.keystore.certificate.chain``
of KIP-651), PKCS12 (read with ``cryptography``) or Java's JKS (read with ``pyjks``, the
``tls`` extra). Trust stores: PEM files or inline PEM, PKCS12 or JKS. The principal of a client certificate is its subject in RFC 2253 form (the
most specific name first, as Java prints it) passed through ``ssl.principal.mapping.rules``.
"""

from __future__ import annotations

import base64
import ctypes
import logging
import os
import re
import ssl
import tempfile
from collections.abc import Callable, Mapping
from typing import Any

from pykfk.config import BrokerConfig, ConfigError

log = logging.getLogger("pykfk.security")

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
# Named in Kafka's older examples (ssl.enabled.protocols=TLSv1.2,TLSv1.1,TLSv1): accepted,
# never offered (OpenSSL's default security level refuses them anyway).
_OBSOLETE_VERSIONS = frozenset({"TLSv1", "TLSv1.1"})
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def server_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    """The TLS context of an SSL or SASL_SSL listener. Raises ConfigError naming the
    setting that is missing or unusable."""
    def setting(name: str) -> Any:
        return config.listener_setting(listener, name)

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _set_versions(context, setting("ssl.enabled.protocols"))
    _load_key_store(context, setting, listener)
    context.verify_mode = _CLIENT_AUTH[setting("ssl.client.auth")]
    if not _load_trust_store(context, setting) and context.verify_mode != ssl.CERT_NONE:
        raise ConfigError("ssl.truststore.location",
                          f"listener {listener}: ssl.client.auth needs a trust store to check clients against")
    _set_cipher_suites(context, setting("ssl.cipher.suites"))
    return context


def client_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    """The context a broker connects to another broker's ``listener`` with."""
    def setting(name: str) -> Any:
        return config.listener_setting(listener, name)

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _set_versions(context, setting("ssl.enabled.protocols"))
    context.check_hostname = bool(setting("ssl.endpoint.identification.algorithm"))
    if not _load_trust_store(context, setting):
        context.load_default_certs()
    if setting("ssl.keystore.location") or setting("ssl.keystore.key"):
        _load_key_store(context, setting, listener)
    return context


# The ssl.* options of an OAuthBearerLoginModule's JAAS settings that a login's HTTPS
# client reads (Kafka reads them there, not from the broker's own ssl.* settings).
HTTPS_CLIENT_OPTIONS = ("ssl.truststore.location", "ssl.truststore.type", "ssl.truststore.password",
                        "ssl.truststore.certificates", "ssl.keystore.location", "ssl.keystore.type",
                        "ssl.keystore.password", "ssl.key.password", "ssl.keystore.key",
                        "ssl.keystore.certificate.chain", "ssl.endpoint.identification.algorithm")


def https_client_context(options: Mapping[str, str], fallback: Callable[[str], Any] | None = None) -> ssl.SSLContext:
    """The context of an HTTPS client of the identity provider: its trust store (and a key
    store, for an endpoint asking for a client certificate) from the ``ssl.*`` options of
    the login's JAAS settings. Without trust store options, ``fallback`` (the broker's own
    trust store settings) where given, else the system's CAs. Store types default to PEM."""
    defaults = {"ssl.truststore.type": "PEM", "ssl.keystore.type": "PEM", "ssl.endpoint.identification.algorithm": "https"}
    own_trust = any(name.startswith("ssl.truststore.") for name in options)

    def setting(name: str) -> Any:
        if name in options:
            return options[name].upper() if name.endswith(".type") else options[name]
        if fallback is not None and name.startswith("ssl.truststore.") and not own_trust:
            return fallback(name)
        return defaults.get(name)

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = bool(setting("ssl.endpoint.identification.algorithm"))
    if not _load_trust_store(context, setting):
        context.load_default_certs()
    if setting("ssl.keystore.location") or setting("ssl.keystore.key"):
        _load_key_store(context, setting, "(an OAUTHBEARER login's HTTPS client)")
    return context


def _set_versions(context: ssl.SSLContext, names: list[str]) -> None:
    versions = []
    for name in names:
        if name in _OBSOLETE_VERSIONS:
            continue
        if name not in _VERSIONS:
            raise ConfigError("ssl.enabled.protocols", f"unsupported TLS version {name} (TLSv1.2, TLSv1.3)")
        versions.append(_VERSIONS[name])
    if not versions:
        raise ConfigError("ssl.enabled.protocols", "at least one TLS version is required")
    context.minimum_version, context.maximum_version = min(versions), max(versions)


# TLS 1.3 cipher suites: Java, IANA and OpenSSL spell them alike ("TLS_AES_128_GCM_SHA256");
# a TLS 1.2 suite in OpenSSL's spelling has no "TLS_" prefix.
TLS13_SUITES = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
                          "TLS_AES_128_CCM_SHA256", "TLS_AES_128_CCM_8_SHA256"})
# Without ssl.cipher.suites a server offers TLS 1.3's usual three suites (OpenSSL's and
# Java's default set) and picks AES-128-GCM first: the same set, the cheaper one per byte.
DEFAULT_TLS13_SUITES = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256")


def _set_cipher_suites(context: ssl.SSLContext, names: list[str]) -> None:
    """ssl.cipher.suites as Kafka reads it: the suites enabled, TLS 1.2 and TLS 1.3 names
    alike, in the server's order of preference. A list without TLS 1.3 suites leaves TLS
    1.2 only, one without TLS 1.2 suites TLS 1.3 only. Raises ConfigError for a list that
    cannot be honoured."""
    tls13 = [name for name in names if name in TLS13_SUITES]
    tls12 = [name for name in names if name not in TLS13_SUITES]
    shown = ",".join(names)
    if tls12:
        try:
            context.set_ciphers(":".join(tls12))
        except ssl.SSLError:
            raise ConfigError("ssl.cipher.suites", f"no usable cipher suite in {shown}") from None
        if not tls13:
            if context.minimum_version == ssl.TLSVersion.TLSv1_3:
                raise ConfigError("ssl.cipher.suites", f"{shown} names no TLS 1.3 suite, and only TLSv1.3 is enabled")
            context.maximum_version = ssl.TLSVersion.TLSv1_2
    elif tls13:
        if context.maximum_version != ssl.TLSVersion.TLSv1_3:
            raise ConfigError("ssl.cipher.suites", f"{shown} names TLS 1.3 suites only, and TLSv1.3 is not enabled")
        context.minimum_version = ssl.TLSVersion.TLSv1_3
    if names and not tls13:
        return
    # The server's order decides (Java's default too), so a client offering AES-256-GCM
    # first still gets the server's first choice.
    context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    if set_tls13_suites(context, tls13 or DEFAULT_TLS13_SUITES):
        return
    if tls13:
        raise ConfigError("ssl.cipher.suites", f"this Python's ssl module cannot restrict TLS 1.3 suites to {shown}; "
                          "name TLS 1.2 suites only, or none")
    log.debug("TLS 1.3 suites keep OpenSSL's default order: its SSL_CTX_set_ciphersuites is out of reach")


class _LibSsl:
    """The few functions of the libssl that Python's ssl module runs on which it offers no
    API for (SSL_CTX_set_ciphersuites: TLS 1.3 suites). They are found through the ``_ssl``
    extension's own handle, so they are that very library's, never another copy's."""

    def __init__(self) -> None:
        import _ssl

        lib = ctypes.CDLL(_ssl.__file__)
        self.set_ciphersuites = lib.SSL_CTX_set_ciphersuites
        self.set_ciphersuites.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        self.set_ciphersuites.restype = ctypes.c_int
        self.get_options = lib.SSL_CTX_get_options
        self.get_options.argtypes = [ctypes.c_void_p]
        # uint64_t from OpenSSL 3.0, unsigned long before.
        self.get_options.restype = ctypes.c_uint64 if ssl.OPENSSL_VERSION_INFO >= (3,) else ctypes.c_ulong


_libssl: _LibSsl | None | bool = False  # False: not looked for yet


def _openssl() -> _LibSsl | None:
    global _libssl
    if _libssl is False:
        try:
            _libssl = _LibSsl()
        except (OSError, AttributeError, ImportError):
            _libssl = None
    return _libssl  # type: ignore[return-value]


def _ctx_pointer(context: ssl.SSLContext, lib: _LibSsl) -> int | None:
    """The SSL_CTX under ``context``: CPython keeps it in the object's first field, after
    the object header. Trusted only once OpenSSL reads through it the very options Python
    reports, before and after one of them is flipped through Python."""
    if type(context).__basicsize__ < object.__basicsize__ + ctypes.sizeof(ctypes.c_void_p):
        return None
    pointer = ctypes.c_void_p.from_address(id(context) + object.__basicsize__).value
    if not pointer:
        return None
    flag = ssl.OP_NO_TICKET
    before = context.options
    try:
        if lib.get_options(pointer) != before:
            return None
        context.options = before ^ flag
        if lib.get_options(pointer) != context.options:
            return None
    finally:
        context.options = before
    return pointer


def set_tls13_suites(context: ssl.SSLContext, names: tuple[str, ...] | list[str]) -> bool:
    """Enable exactly ``names`` as the TLS 1.3 suites of ``context``, in that order
    (Python 3.11's ssl module has no call for it: set_ciphers is TLS 1.2's). False, the
    context untouched, where the interpreter's libssl cannot be reached safely."""
    lib = _openssl()
    if lib is None:
        return False
    pointer = _ctx_pointer(context, lib)
    if pointer is None or lib.set_ciphersuites(pointer, ":".join(names).encode()) != 1:
        return False
    enabled = [c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.3"]
    if enabled != list(names):
        raise ssl.SSLError(f"TLS 1.3 suites set to {names}, OpenSSL reports {enabled}")
    return True


def _load_key_store(context: ssl.SSLContext, setting: Callable[[str], Any], listener: str) -> None:
    location, key_password = setting("ssl.keystore.location"), setting("ssl.key.password")
    inline_key, inline_chain = setting("ssl.keystore.key"), setting("ssl.keystore.certificate.chain")
    try:
        if setting("ssl.keystore.type") == "PKCS12":
            if not location:
                raise ConfigError("ssl.keystore.location", f"listener {listener}: a PKCS12 key store needs a file")
            key_pem, chain_pem = _pkcs12_to_pem(location, setting("ssl.keystore.password"))
            _load_pem_pair(context, key_pem, chain_pem, None)
        elif setting("ssl.keystore.type") == "JKS":
            if not location:
                raise ConfigError("ssl.keystore.location", f"listener {listener}: a JKS key store needs a file")
            key_pem, chain_pem = _jks_to_pem(location, setting("ssl.keystore.password"), key_password)
            _load_pem_pair(context, key_pem, chain_pem, None)
        elif inline_key or inline_chain:
            if not (inline_key and inline_chain):
                raise ConfigError("ssl.keystore.key", "ssl.keystore.key and ssl.keystore.certificate.chain go together")
            _load_pem_pair(context, inline_key.encode(), inline_chain.encode(), key_password)
        elif location:
            context.load_cert_chain(location, password=key_password or setting("ssl.keystore.password"))
        else:
            raise ConfigError("ssl.keystore.location", f"listener {listener} uses TLS but has no key store")
    except (OSError, ssl.SSLError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError("ssl.keystore.location", f"listener {listener}: cannot load the key store: {exc}") from None


def _load_pem_pair(context: ssl.SSLContext, key_pem: bytes, chain_pem: bytes, password: str | None) -> None:
    """load_cert_chain reads files only: the PEM goes through a private temporary file
    that is removed at once."""
    fd, path = tempfile.mkstemp(prefix="pykfk-key-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(key_pem.strip() + b"\n" + chain_pem.strip() + b"\n")
        context.load_cert_chain(path, password=password)
    finally:
        os.unlink(path)


def _load_trust_store(context: ssl.SSLContext, setting: Callable[[str], Any]) -> bool:
    location, inline = setting("ssl.truststore.location"), setting("ssl.truststore.certificates")
    try:
        if setting("ssl.truststore.type") == "PKCS12" and location:
            context.load_verify_locations(cadata=_pkcs12_certificates(location, setting("ssl.truststore.password")))
        elif setting("ssl.truststore.type") == "JKS" and location:
            context.load_verify_locations(cadata=_jks_certificates(location, setting("ssl.truststore.password")))
        elif location:
            context.load_verify_locations(cafile=location)
        elif inline:
            context.load_verify_locations(cadata=inline)
        else:
            return False
    except (OSError, ssl.SSLError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError("ssl.truststore.location", f"cannot load the trust store: {exc}") from None
    return True


def _pkcs12(path: str, password: str | None) -> Any:
    try:
        from cryptography.hazmat.primitives.serialization import pkcs12
    except ImportError:
        raise ConfigError("ssl.keystore.type", "PKCS12 stores need the 'cryptography' package") from None
    with open(path, "rb") as f:
        return pkcs12.load_pkcs12(f.read(), password.encode() if password else None)


def _pkcs12_to_pem(path: str, password: str | None) -> tuple[bytes, bytes]:
    from cryptography.hazmat.primitives import serialization

    store = _pkcs12(path, password)
    if store.key is None or store.cert is None:
        raise ConfigError("ssl.keystore.location", f"{path} holds no private key and certificate")
    key = store.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption())
    chain = [store.cert.certificate, *(c.certificate for c in store.additional_certs)]
    return key, b"".join(c.public_bytes(serialization.Encoding.PEM) for c in chain)


def _pkcs12_certificates(path: str, password: str | None) -> str:
    from cryptography.hazmat.primitives import serialization

    store = _pkcs12(path, password)
    certs = [c.certificate for c in store.additional_certs]
    if store.cert is not None:
        certs.append(store.cert.certificate)
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)


def _jks(path: str, password: str | None, setting: str) -> Any:
    try:
        import jks
    except ImportError:
        raise ConfigError(setting, "JKS stores need the 'pyjks' package (pip install 'pykfk[tls]')") from None
    try:
        # Without a password the store's integrity is not checked (as in Java).
        return jks.KeyStore.load(path, password or None, try_decrypt_keys=False)
    except (jks.util.KeystoreException, jks.util.BadKeystoreFormatException, ValueError) as exc:
        raise ConfigError(setting, f"cannot read the JKS store {path}: {exc}") from None


def _pem(label: str, der: bytes) -> bytes:
    body = base64.encodebytes(der).replace(b"\n", b"")
    lines = [body[i:i + 64] for i in range(0, len(body), 64)]
    return b"-----BEGIN " + label.encode() + b"-----\n" + b"\n".join(lines) + b"\n-----END " + label.encode() + b"-----\n"


def _jks_to_pem(path: str, store_password: str | None, key_password: str | None) -> tuple[bytes, bytes]:
    """The private key (Kafka: protected by ssl.key.password, else the store's password)
    and its certificate chain, as PEM."""
    import jks

    store = _jks(path, store_password, "ssl.keystore.location")
    if not store.private_keys:
        raise ConfigError("ssl.keystore.location", f"{path} holds no private key entry")
    if len(store.private_keys) > 1:
        raise ConfigError("ssl.keystore.location", f"{path} holds {len(store.private_keys)} private keys; "
                          "Kafka's key store has one")
    entry = next(iter(store.private_keys.values()))
    try:
        entry.decrypt(key_password or store_password or "")
    except jks.util.DecryptionFailureException:
        raise ConfigError("ssl.key.password", f"cannot decrypt the private key in {path}: wrong password") from None
    chain = b"".join(_pem("CERTIFICATE", der) for _kind, der in entry.cert_chain)
    return _pem("PRIVATE KEY", entry.pkey_pkcs8), chain


def _jks_certificates(path: str, password: str | None) -> str:
    store = _jks(path, password, "ssl.truststore.location")
    certs = [entry.cert for entry in store.certs.values()]
    certs += [der for entry in store.private_keys.values() for _kind, der in entry.cert_chain[:1]]
    if not certs:
        raise ConfigError("ssl.truststore.location", f"{path} holds no certificate")
    return "".join(_pem("CERTIFICATE", der).decode() for der in certs)


# -- principals -----------------------------------------------------------------------

_SHORT_NAMES = {
    "commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU", "localityName": "L",
    "stateOrProvinceName": "ST", "countryName": "C", "streetAddress": "STREET", "domainComponent": "DC",
    "userId": "UID",
}
_RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:\\/|[^/])*)/((?:\\/|[^/])*)/([LU]?))\s*(?:,|$)")


def subject_dn(peercert: dict[str, Any]) -> str:
    """A certificate's subject as Java's X500Principal.getName() prints it (RFC 2253)."""
    rdns = []
    for rdn in peercert.get("subject", ()):
        rdns.append("+".join(f"{_SHORT_NAMES.get(name, name)}={_escape(value)}" for name, value in rdn))
    return ",".join(reversed(rdns))


def _escape(value: str) -> str:
    value = re.sub(r'([,+"\\<>;])', r"\\\1", value)
    if value.startswith(("#", " ")):
        value = "\\" + value
    if value.endswith(" "):
        value = value[:-1] + "\\ "
    return value


class PrincipalMapper:
    """``ssl.principal.mapping.rules``: ``RULE:pattern/replacement/[LU]`` entries and
    ``DEFAULT``, tried in order; the first whose pattern matches the whole name wins."""

    def __init__(self, rules: str):
        self.rules: list[tuple[re.Pattern[str], str, str] | None] = []
        pos = 0
        text = rules.strip()
        while pos < len(text):
            match = _RULE.match(text, pos)
            if match is None or match.end() == pos:
                raise ConfigError("ssl.principal.mapping.rules", f"cannot parse rule at {text[pos:pos + 30]!r}")
            if match.group(1):
                self.rules.append(None)
            else:
                pattern = match.group(2).replace("\\/", "/")
                replacement = re.sub(r"\$(\d)", r"\\g<\1>", match.group(3).replace("\\/", "/"))
                try:
                    self.rules.append((re.compile(pattern), replacement, match.group(4)))
                except re.error as exc:
                    raise ConfigError("ssl.principal.mapping.rules", f"bad pattern {pattern!r}: {exc}") from None
            pos = match.end()
        if not self.rules:
            self.rules.append(None)

    def map(self, name: str) -> str:
        for rule in self.rules:
            if rule is None:
                return name
            pattern, replacement, case = rule
            if pattern.fullmatch(name):
                mapped = pattern.sub(replacement, name, count=1)
                return mapped.lower() if case == "L" else mapped.upper() if case == "U" else mapped
        return name
