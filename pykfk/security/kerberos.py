"""SASL/GSSAPI (Kerberos V5, RFC 4752) on the broker, through python-gssapi and the
system's Kerberos libraries, and Kafka's ``sasl.kerberos.principal.to.local.rules``.

The broker accepts with its service key from a keytab (the listener's
``gssapi.sasl.jaas.config``: Krb5LoginModule with ``keyTab`` and ``principal``); no KDC
is asked. After the security context is established the broker offers no security layer
(Kafka's only one) in a wrapped 4-byte message; the client's wrapped answer chooses it
and ends the login. The session lasts no longer than the client's service ticket: a
client logs in again with a new one (KIP-368) or its connection is closed. The authorization id a client sends is ignored, as Kafka does: the
principal is the client's Kerberos name mapped by the rules.

Rules (Kafka's KerberosShortNamer, Hadoop's auth_to_local): ``DEFAULT`` maps
``name[/host]@<default realm>`` to ``name``; ``RULE:[n:format](regex)s/pattern/repl/g/L``
applies to names of ``n`` components: ``format`` built from ``$0`` (realm), ``$1``,
``$2`` (components), kept when it matches ``regex``, edited by the sed expression,
lower- or upper-cased with ``/L`` / ``/U``. The first rule that applies wins; a name no
rule applies to cannot log in.
"""

from __future__ import annotations

import dataclasses
import os
import re
import struct
import time
from typing import Any

MECHANISM = "GSSAPI"
NO_SECURITY_LAYER = 1
MAX_MESSAGE_SIZE = 0xFFFFFF
INDEFINITE = 0xFFFFFFFF  # GSS_C_INDEFINITE: a context lifetime without end

_RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:\[(\d+):([^\]]*)\](?:\(([^)]*)\))?"
                   r"(?:s/([^/]*)/([^/]*)/(g)?)?/?(L|U)?)\s*(?:,|$)")
_NON_SIMPLE = re.compile(r"[/@]")


class KerberosError(ValueError):
    """A rule that does not parse, or a name no rule maps."""


@dataclasses.dataclass(frozen=True)
class KerberosName:
    service: str
    host: str | None
    realm: str

    @classmethod
    def parse(cls, text: str) -> KerberosName:
        match = re.fullmatch(r"([^/@]+)(?:/([^/@]+))?@([^/@]+)", text)
        if match is None:
            raise KerberosError(f"malformed Kerberos name {text!r}")
        return cls(match.group(1), match.group(2), match.group(3))


@dataclasses.dataclass(frozen=True)
class _Rule:
    default: bool
    components: int = 0
    format: str = ""
    match: re.Pattern[str] | None = None
    pattern: re.Pattern[str] | None = None
    replacement: str = ""
    repeat: bool = False
    case: str | None = None

    def apply(self, name: KerberosName, default_realm: str | None) -> str | None:
        params = [name.realm, name.service] + ([name.host] if name.host is not None else [])
        if self.default:
            return name.service if name.realm == default_realm else None
        if len(params) - 1 != self.components:
            return None
        base = re.sub(r"\$(\d)", lambda m: params[int(m.group(1))] if int(m.group(1)) < len(params) else "",
                      self.format)
        if self.match is not None and not self.match.fullmatch(base):
            return None
        result = base
        if self.pattern is not None:
            result = self.pattern.sub(self.replacement, base, count=0 if self.repeat else 1)
        if _NON_SIMPLE.search(result):
            raise KerberosError(f"non-simple name {result} after rule {self.format}")
        return result.lower() if self.case == "L" else result.upper() if self.case == "U" else result


def parse_rules(text: str | list[str]) -> list[_Rule]:
    """Rules from the setting (a list, or one string with the rules separated by commas)."""
    source = ",".join(text) if isinstance(text, list) else text
    rules: list[_Rule] = []
    pos = 0
    source = source.strip()
    while pos < len(source):
        match = _RULE.match(source, pos)
        if match is None or match.end() == pos:
            raise KerberosError(f"invalid rule at {source[pos:pos + 40]!r}")
        pos = match.end()
        default, count, fmt, regex, pattern, replacement, repeat, case = match.groups()
        if default:
            rules.append(_Rule(True))
            continue
        try:
            rules.append(_Rule(False, int(count), fmt, re.compile(regex) if regex else None,
                               re.compile(pattern) if pattern is not None else None,
                               re.sub(r"\$(\d)", r"\\\1", replacement or ""), bool(repeat), case))
        except re.error as exc:
            raise KerberosError(f"invalid regular expression in a rule: {exc}") from None
    return rules or [_Rule(True)]


def default_realm() -> str | None:
    """``default_realm`` of the Kerberos configuration (``KRB5_CONFIG`` or /etc/krb5.conf)."""
    for path in os.environ.get("KRB5_CONFIG", "/etc/krb5.conf").split(":"):
        try:
            with open(path, encoding="utf-8") as f:
                match = re.search(r"^\s*default_realm\s*=\s*(\S+)", f.read(), re.MULTILINE)
        except OSError:
            continue
        if match:
            return match.group(1)
    return None


class KerberosNameMapper:
    def __init__(self, rules: str | list[str], realm: str | None = None):
        self.rules = parse_rules(rules)
        self.realm = realm if realm is not None else default_realm()

    def short_name(self, principal: str) -> str:
        name = KerberosName.parse(principal)
        for rule in self.rules:
            result = rule.apply(name, self.realm)
            if result is not None:
                return result
        raise KerberosError(f"no rule applies to {principal}")


class GssapiAcceptor:
    """The broker's Kerberos identity on one listener: its service principal and keytab."""

    def __init__(self, principal: str, keytab: str, mapper: KerberosNameMapper):
        import gssapi

        self.principal = principal
        self.mapper = mapper
        name = gssapi.Name(principal, gssapi.NameType.kerberos_principal)
        self.credentials = gssapi.Credentials(name=name, usage="accept", mechs=[gssapi.MechType.kerberos],
                                              store={"keytab": keytab})


class GssapiServer:
    """One login: ``step(token)`` answers each client token; raises ``fail(reason)``."""

    def __init__(self, acceptor: GssapiAcceptor, fail: Any):
        import gssapi

        self._gssapi = gssapi
        self._acceptor = acceptor
        self._fail = fail
        self._context = gssapi.SecurityContext(creds=acceptor.credentials, usage="accept")
        self._offered = False
        self.complete = False
        self.user = ""
        self.kerberos_name = ""
        self.expiry_ms: int | None = None  # the end of the client's service ticket, once complete

    def step(self, token: bytes) -> bytes:
        gss = self._gssapi
        try:
            if not self._context.complete:
                if not token:
                    raise self._fail("Authentication failed: GSSAPI: an empty token")
                answer = self._context.step(token) or b""
                if not self._context.complete or answer:
                    return answer
            if not self._offered:
                self._offered = True
                offer = struct.pack(">I", (NO_SECURITY_LAYER << 24) | MAX_MESSAGE_SIZE)
                return bytes(self._context.wrap(offer, False).message)
            chosen = self._context.unwrap(token).message
        except gss.exceptions.GSSError as exc:
            raise self._fail(f"Authentication failed: GSSAPI: {exc.gen_message()}") from None
        if len(chosen) < 4 or not chosen[0] & NO_SECURITY_LAYER:
            raise self._fail("Authentication failed: the client chose a security layer other than none")
        self.kerberos_name = str(self._context.initiator_name)
        self.expiry_ms = self._ticket_end_ms()
        try:
            self.user = self._acceptor.mapper.short_name(self.kerberos_name)
        except KerberosError as exc:
            raise self._fail(f"Authentication failed: {exc}") from None
        self.complete = True
        return b""

    def _ticket_end_ms(self) -> int | None:
        """When the client's service ticket ends (ms since the epoch): the session lasts
        no longer (KIP-368). The ticket's end time from the established context (MIT's
        lucid context); else the context's lifetime, which counts the Kerberos clock skew
        too; a ticket accepted within the skew after its end keeps that window."""
        now = time.time()
        end = 0.0
        try:
            from gssapi.raw import krb5_export_lucid_sec_context

            lucid: Any = krb5_export_lucid_sec_context(self._context, 1)
            end = float(lucid.endtime)
        except Exception:  # noqa: BLE001 - not MIT's library, or no lucid context: the lifetime below
            end = 0.0
        if end > now:
            return int(end * 1000)
        lifetime = self._context.lifetime
        if isinstance(lifetime, int) and 0 < lifetime < INDEFINITE:
            return int((now + lifetime) * 1000)
        return None
