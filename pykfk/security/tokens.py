"""Delegation tokens (KIP-48, KIP-373) as Kafka keeps and checks them.

A token is an id and an HMAC: HMAC-SHA512 of the id keyed with
``delegation.token.secret.key``, so every broker with the same secret derives the same
HMAC from the stored token, and the HMAC itself is never stored. A client logs in with
SCRAM, the id as user name and the base64 HMAC as password, and the ``tokenauth=true``
SCRAM extension; it then acts as the token's owner.

What is stored per token is Kafka's ZooKeeper JSON (``/delegation_token/tokens/<id>``)::

    {"version":3,"owner":"User%3Aalice","tokenRequester":"User%3Aalice",
     "renewers":["User%3Abob"],"issueTimestamp":..,"maxTimestamp":..,
     "expiryTimestamp":..,"tokenId":"<id>"}

with principals URL-encoded as Kafka's Sanitizer writes them. The rules of Create, Renew,
Expire and Describe are Kafka's ``DelegationTokenManager``'s, as functions of the stored
tokens and the time, without I/O.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import re
import urllib.parse
import uuid
from collections.abc import Callable, Iterable

from pykfk.errors import ErrorCode
from pykfk.security.scram import ScramCredential, make_credential

USER_TYPE = "User"
FORMAT_VERSION = 3  # Kafka's DelegationTokenManagerZk.CurrentVersion
# The SCRAM extension a token login sends (Kafka's ScramLoginModule.TOKEN_AUTH_CONFIG).
TOKEN_AUTH_EXTENSION = "tokenauth"


class TokenError(ValueError):
    """A stored token that cannot be read."""


def _sanitize(principal: str) -> str:
    return urllib.parse.quote(principal, safe="").replace("~", "%7E")


@dataclasses.dataclass(frozen=True)
class TokenInfo:
    """One token as stored: principals as ``Type:name``, times in ms since the epoch."""

    token_id: str
    owner: str
    requester: str
    renewers: tuple[str, ...]
    issue_ms: int
    expiry_ms: int
    max_ms: int

    def owner_or_renewer(self, principal: str) -> bool:
        """Kafka's ownerOrRenewer: the owner, the requester or a renewer."""
        return principal in (self.owner, self.requester) or principal in self.renewers

    def expired(self, now_ms: int) -> bool:
        return self.expiry_ms < now_ms or self.max_ms < now_ms

    def to_json(self) -> bytes:
        return json.dumps({
            "version": FORMAT_VERSION, "owner": _sanitize(self.owner), "tokenRequester": _sanitize(self.requester),
            "renewers": [_sanitize(r) for r in self.renewers], "issueTimestamp": self.issue_ms,
            "maxTimestamp": self.max_ms, "expiryTimestamp": self.expiry_ms, "tokenId": self.token_id,
        }, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes | str) -> TokenInfo:
        try:
            doc = json.loads(data)
            owner = urllib.parse.unquote(str(doc["owner"]))
            return cls(str(doc["tokenId"]), owner, urllib.parse.unquote(str(doc.get("tokenRequester", owner))),
                       tuple(urllib.parse.unquote(str(r)) for r in doc.get("renewers", [])),
                       int(doc["issueTimestamp"]), int(doc["expiryTimestamp"]), int(doc["maxTimestamp"]))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise TokenError(f"malformed delegation token: {exc!r}") from None


@dataclasses.dataclass(frozen=True)
class TokenSettings:
    """``delegation.token.secret.key`` (empty: tokens disabled), ``.max.lifetime.ms`` and
    ``.expiry.time.ms`` (the renewal period when a request gives none)."""

    secret: str
    max_lifetime_ms: int = 7 * 24 * 3600 * 1000
    renew_ms: int = 24 * 3600 * 1000

    @property
    def enabled(self) -> bool:
        return bool(self.secret)


def token_hmac(secret: str, token_id: str) -> bytes:
    """Kafka's HMAC of a token: HmacSHA512 of the id keyed with the secret (UTF-8)."""
    return hmac.new(secret.encode(), token_id.encode(), hashlib.sha512).digest()


def token_password(mac: bytes) -> str:
    """The SCRAM password of a token: its HMAC in base64 (Kafka's hmacAsBase64String)."""
    return base64.b64encode(mac).decode()


def token_credential(secret: str, token_id: str, mechanism: str) -> ScramCredential:
    """The SCRAM credential a token logs in with (fresh salt; Kafka's minimum iterations)."""
    return make_credential(mechanism, token_password(token_hmac(secret, token_id)))


_TOKEN_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")


def plausible_token_id(text: str) -> bool:
    """Whether ``text`` could be a token id (brokers make them URL-safe base64): a login
    naming anything else is refused before the store is asked."""
    return _TOKEN_ID.fullmatch(text) is not None


def new_token_id() -> str:
    """A random id as Kafka makes them (a UUID in unpadded URL-safe base64)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def create(settings: TokenSettings, owner: str, requester: str, renewers: Iterable[str], max_lifetime_ms: int,
           now_ms: int) -> TokenInfo:
    """A new token: its maximum lifetime is the asked one capped by the setting (the
    setting when none is asked), and it expires after the renewal period unless renewed."""
    lifetime = settings.max_lifetime_ms if max_lifetime_ms <= 0 else min(max_lifetime_ms, settings.max_lifetime_ms)
    max_ms = now_ms + lifetime
    return TokenInfo(new_token_id(), owner, requester, tuple(dict.fromkeys(renewers)), now_ms,
                     min(max_ms, now_ms + settings.renew_ms), max_ms)


def find_by_hmac(tokens: Iterable[TokenInfo], secret: str, mac: bytes) -> TokenInfo | None:
    for token in tokens:
        if hmac.compare_digest(token_hmac(secret, token.token_id), mac):
            return token
    return None


def renew(settings: TokenSettings, token: TokenInfo | None, principal: str, period_ms: int,
          now_ms: int) -> tuple[int, TokenInfo | None]:
    """Kafka's renewToken: (error code, the renewed token)."""
    if token is None:
        return ErrorCode.DELEGATION_TOKEN_NOT_FOUND, None
    if not token.owner_or_renewer(principal):
        return ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH, None
    if token.expired(now_ms):
        return ErrorCode.DELEGATION_TOKEN_EXPIRED, None
    period = settings.renew_ms if period_ms < 0 else period_ms
    return ErrorCode.NONE, dataclasses.replace(token, expiry_ms=min(token.max_ms, now_ms + period))


def expire(token: TokenInfo | None, principal: str, period_ms: int, now_ms: int) -> tuple[int, TokenInfo | None]:
    """Kafka's expireToken: (error code, the token with its new expiry); a negative
    period ends the token now (its expiry is then ``now_ms``: the caller removes it)."""
    if token is None:
        return ErrorCode.DELEGATION_TOKEN_NOT_FOUND, None
    if not token.owner_or_renewer(principal):
        return ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH, None
    if period_ms < 0:
        return ErrorCode.NONE, dataclasses.replace(token, expiry_ms=now_ms)
    if token.expired(now_ms):
        return ErrorCode.DELEGATION_TOKEN_EXPIRED, None
    return ErrorCode.NONE, dataclasses.replace(token, expiry_ms=min(token.max_ms, now_ms + period_ms))


def visible(token: TokenInfo, principal: str, owners: list[str] | None,
            may_describe_token: Callable[[str], bool], may_describe_owner: Callable[[str], bool]) -> bool:
    """Kafka's filterToken: a token of the asked owners (as owner or renewer) that the
    principal owns, requested or renews, or may DESCRIBE (the DELEGATION_TOKEN resource of
    its id) or DESCRIBE_TOKENS of (the USER resource of its owner)."""
    if owners is not None and not any(token.owner_or_renewer(owner) for owner in owners):
        return False
    return (token.owner_or_renewer(principal) or may_describe_token(token.token_id)
            or may_describe_owner(token.owner))


def requests_allowed(security_protocol: str, principal: str, token_authenticated: bool) -> bool:
    """Kafka's allowTokenRequests: tokens are made, renewed, expired and described only
    over an authenticated channel (SASL, or TLS with a client certificate), never by a
    connection that logged in with a token."""
    if token_authenticated or security_protocol == "PLAINTEXT":
        return False
    return not (security_protocol == "SSL" and principal == "User:ANONYMOUS")


def split_principal(principal: str) -> tuple[str, str]:
    """``Type:name`` -> (type, name)."""
    kind, _sep, name = principal.partition(":")
    return kind, name
