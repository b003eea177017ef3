"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka runs them.

A credential is what the broker keeps instead of a password: salt, StoredKey, ServerKey
and the iteration count, in Kafka's text form
``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>`` (the value under a
mechanism name in ZooKeeper's ``/config/users/<user>``). ``ScramServer`` checks a client
in two round trips; ``ScramClient`` is the other side (brokers logging in to brokers).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import os
import re

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# Kafka's bounds on the iteration count (ScramMechanism).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
# Kafka's numbering of the mechanisms in Describe/AlterUserScramCredentials.
MECHANISM_TYPES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MECHANISM_NAMES = {v: k for k, v in MECHANISM_TYPES.items()}


class ScramError(ValueError):
    """The exchange failed: a malformed message, an unknown user or a wrong proof."""


@dataclasses.dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_text(self) -> str:
        b64 = base64.b64encode
        return (f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
                f"server_key={b64(self.server_key).decode()},iterations={self.iterations}")

    @classmethod
    def from_text(cls, text: str) -> ScramCredential:
        fields = dict(item.split("=", 1) for item in text.split(",") if "=" in item)
        try:
            return cls(base64.b64decode(fields["salt"]), base64.b64decode(fields["stored_key"]),
                       base64.b64decode(fields["server_key"]), int(fields["iterations"]))
        except (KeyError, ValueError) as exc:
            raise ScramError(f"malformed SCRAM credential: {exc}") from None


def _hmac(digest: str, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, digest).digest()


def salted_password(mechanism: str, password: bytes, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(MECHANISMS[mechanism], password, salt, iterations)


def credential_from_salted(mechanism: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    digest = MECHANISMS[mechanism]
    client_key = _hmac(digest, salted, b"Client Key")
    return ScramCredential(salt, hashlib.new(digest, client_key).digest(),
                           _hmac(digest, salted, b"Server Key"), iterations)


def make_credential(mechanism: str, password: str, iterations: int = MIN_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:
    salt = os.urandom(32) if salt is None else salt
    salted = salted_password(mechanism, password.encode(), salt, iterations)
    return credential_from_salted(mechanism, salted, salt, iterations)


def _attributes(message: str, extensions: dict[str, str] | None = None) -> dict[str, str]:
    """The one-letter attributes of a message; where ``extensions`` is given (a
    client-first message), longer alphanumeric names are Kafka's SCRAM extensions
    (``tokenauth=true``) and go there."""
    attrs: dict[str, str] = {}
    for item in message.split(","):
        key, sep, value = item.partition("=")
        if sep and len(key) == 1:
            attrs.setdefault(key, value)
        elif sep and extensions is not None and key.isascii() and key.isalnum():
            extensions.setdefault(key, value)
        else:
            raise ScramError(f"malformed SCRAM attribute {item[:20]!r}")
    return attrs


def _decode_name(name: str) -> str:
    if re.search(r"=(?!2C|3D)", name):
        raise ScramError("malformed user name")
    return name.replace("=2C", ",").replace("=3D", "=")


def _encode_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


class ScramServer:
    """One server side of an exchange: ``first`` takes the client-first message and
    returns the server-first; ``final`` takes the client-final message and returns the
    server-final. Raises ScramError on any failure."""

    def __init__(self, mechanism: str):
        self.mechanism = mechanism
        self.digest = MECHANISMS[mechanism]
        self.user = ""
        self.extensions: dict[str, str] = {}
        self._credential: ScramCredential | None = None
        self._nonce = ""
        self._first_bare = ""
        self._server_first = ""

    def parse_first(self, message: bytes) -> str:
        """The user name of a client-first message (looked up before ``first``)."""
        try:
            text = message.decode()
        except UnicodeDecodeError:
            raise ScramError("client-first message is not UTF-8") from None
        if not text.startswith(("n,", "y,")):
            raise ScramError("channel binding is not supported")
        gs2_end = text.find(",", 2)
        if gs2_end < 0:
            raise ScramError("malformed client-first message")
        self._first_bare = text[gs2_end + 1:]
        attrs = _attributes(self._first_bare, self.extensions)
        if "n" not in attrs or "r" not in attrs:
            raise ScramError("client-first message lacks n= or r=")
        if "m" in attrs:
            raise ScramError("mandatory SCRAM extensions are not supported")
        authzid = text[2:gs2_end]
        self.user = _decode_name(attrs["n"])
        if authzid and authzid != f"a={_encode_name(self.user)}":
            raise ScramError("authorization id differs from the user name")
        self._client_nonce = attrs["r"]
        return self.user

    def first(self, credential: ScramCredential) -> bytes:
        self._credential = credential
        self._nonce = self._client_nonce + base64.b64encode(os.urandom(24)).decode()
        self._server_first = (f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},"
                              f"i={credential.iterations}")
        return self._server_first.encode()

    def final(self, message: bytes) -> bytes:
        credential = self._credential
        if credential is None:
            raise ScramError("client-final message before client-first")
        try:
            text = message.decode()
        except UnicodeDecodeError:
            raise ScramError("client-final message is not UTF-8") from None
        without_proof, sep, proof_text = text.rpartition(",p=")
        if not sep:
            raise ScramError("client-final message lacks p=")
        attrs = _attributes(without_proof)
        if attrs.get("r") != self._nonce:
            raise ScramError("nonce mismatch")
        try:
            proof = base64.b64decode(proof_text, validate=True)
        except ValueError:
            raise ScramError("malformed proof") from None
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        signature = _hmac(self.digest, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise ScramError("malformed proof")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self.digest, client_key).digest(), credential.stored_key):
            raise ScramError("invalid credentials")
        verifier = _hmac(self.digest, credential.server_key, auth_message)
        return b"v=" + base64.b64encode(verifier)


class ScramClient:
    """The client side: ``first()``, ``final(server_first)``, ``check(server_final)``."""

    def __init__(self, mechanism: str, user: str, password: str, extensions: dict[str, str] | None = None):
        self.mechanism = mechanism
        self.digest = MECHANISMS[mechanism]
        self._password = password.encode()
        self._nonce = base64.b64encode(os.urandom(24)).decode()
        tail = "".join(f",{key}={value}" for key, value in (extensions or {}).items())
        self._first_bare = f"n={_encode_name(user)},r={self._nonce}{tail}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        attrs = _attributes(text)
        nonce, salt, iterations = attrs.get("r", ""), base64.b64decode(attrs.get("s", "")), int(attrs.get("i", "0"))
        if not nonce.startswith(self._nonce) or not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ScramError("unexpected server-first message")
        salted = salted_password(self.mechanism, self._password, salt, iterations)
        credential = credential_from_salted(self.mechanism, salted, salt, iterations)
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        client_key = _hmac(self.digest, salted, b"Client Key")
        signature = _hmac(self.digest, credential.stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = _hmac(self.digest, credential.server_key, auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def check(self, server_final: bytes) -> None:
        if not hmac.compare_digest(server_final, b"v=" + base64.b64encode(self._server_signature)):
            raise ScramError("the server's signature does not match")
