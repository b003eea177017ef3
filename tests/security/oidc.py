"""A small OpenID Connect identity provider for tests, on 127.0.0.1: a JWKS endpoint and
a token endpoint for client credentials and RFC 7523's jwt-bearer assertions (HTTPS with a
TLS context, else HTTP), RSA keys that can be rotated, and endpoints that can be made to
hang or serve garbage."""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

HANG_LIMIT_S = 15.0
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"


class OidcIssuer:
    """``url`` is the issuer; ``jwks_url`` and ``token_url`` its endpoints. ``clients``
    maps client id -> secret; a client's tokens name it as ``sub``."""

    def __init__(self, audience: str = "kafka", lifetime_s: int = 300, tls: ssl.SSLContext | None = None):
        self.audience = audience
        self.lifetime_s = lifetime_s
        self.clients: dict[str, str] = {}
        self.lifetimes: dict[str, int] = {}  # client id -> token lifetime (s), else lifetime_s
        self.tokens_issued: dict[str, int] = {}
        # jwt-bearer grant (RFC 7523): assertion issuer -> its public key; the assertion
        # must name this issuer as audience, and its sub is the token's.
        self.assertion_keys: dict[str, Any] = {}
        self.requests: list[dict[str, str]] = []  # each token request's form (assertions too)
        self.jwks_mode = "ok"  # "ok", "hang" or "garbage"
        self.ca_file: str | None = None  # the CA of its certificate, with TLS
        self.jwks_requests = 0
        self._release = threading.Event()
        self.keys: list[tuple[str, Any]] = []
        self.rotate()
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path != "/jwks":
                    self.send_error(404)
                    return
                issuer.jwks_requests += 1
                if issuer.jwks_mode == "hang":
                    issuer._release.wait(HANG_LIMIT_S)
                body = b"<html>not json" if issuer.jwks_mode == "garbage" else issuer.jwks().encode()
                self._answer(200, body)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                form = urllib.parse.parse_qs(self.rfile.read(length).decode())
                issuer.requests.append({k: v[0] for k, v in form.items()})
                if form.get("grant_type") == [JWT_BEARER] and self.path == "/token":
                    client_id = issuer._check_assertion(form.get("assertion", [""])[0])
                    if client_id is None:
                        self._answer(400, b'{"error":"invalid_grant"}')
                        return
                else:
                    client_id, secret = issuer._basic_auth(self.headers.get("Authorization", ""), form)
                    if self.path != "/token" or form.get("grant_type") != ["client_credentials"] \
                            or issuer.clients.get(client_id) != secret:
                        self._answer(401, b'{"error":"invalid_client"}')
                        return
                lifetime = issuer.lifetimes.get(client_id, issuer.lifetime_s)
                token = issuer.token(client_id, exp=int(time.time()) + lifetime)
                issuer.tokens_issued[client_id] = issuer.tokens_issued.get(client_id, 0) + 1
                self._answer(200, json.dumps({"access_token": token, "token_type": "Bearer",
                                              "expires_in": lifetime}).encode())

            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        scheme = "https" if tls is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self._server.server_address[1]}"
        self.jwks_url = self.url + "/jwks"
        self.token_url = self.url + "/token"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @classmethod
    def over_https(cls, ca: Any, name: str, **kwargs: Any) -> OidcIssuer:
        """An issuer serving HTTPS with a certificate for 127.0.0.1 and localhost from the
        tests' CA (tests.security.certs), its ``ca_file`` that CA's certificate."""
        pem = ca.issue(name, "localhost", server=True)
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(pem.cert, pem.key)
        issuer = cls(tls=tls, **kwargs)
        issuer.ca_file = str(ca.cert_path)
        return issuer

    @staticmethod
    def _basic_auth(header: str, form: dict[str, list[str]]) -> tuple[str, str]:
        if header.lower().startswith("basic "):
            client_id, _sep, secret = base64.b64decode(header[6:]).decode().partition(":")
            return urllib.parse.unquote(client_id), urllib.parse.unquote(secret)
        return form.get("client_id", [""])[0], form.get("client_secret", [""])[0]

    def _check_assertion(self, assertion: str) -> str | None:
        """The subject of a jwt-bearer assertion signed by a known issuer, else None."""
        try:
            unverified = jwt.decode(assertion, options={"verify_signature": False})
            key = self.assertion_keys[unverified["iss"]]
            claims = jwt.decode(assertion, key, algorithms=["RS256", "ES256"], audience=self.url,
                                options={"require": ["exp", "iat", "sub"]})
        except (jwt.PyJWTError, KeyError, TypeError):
            return None
        return str(claims["sub"])

    def rotate(self, keep_old: bool = False) -> str:
        """A new signing key; the JWKS keeps the old ones only with ``keep_old``."""
        kid = uuid.uuid4().hex[:12]
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.keys = [*self.keys, (kid, key)] if keep_old else [(kid, key)]
        return kid

    def jwks(self) -> str:
        entries = []
        for kid, key in self.keys:
            jwk = RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
            entries.append({**jwk, "kid": kid, "alg": "RS256", "use": "sig"})
        return json.dumps({"keys": entries})

    def token(self, sub: str, *, key: Any = None, kid: str | None = None, **claims: Any) -> str:
        """A token for ``sub`` signed with the current key (or ``key`` under ``kid``)."""
        now = int(time.time())
        body = {"sub": sub, "iss": self.url, "aud": self.audience, "iat": now, "exp": now + self.lifetime_s,
                "scope": "kafka", **claims}
        current_kid, current_key = self.keys[-1]
        return jwt.encode(body, key or current_key, algorithm="RS256", headers={"kid": kid or current_kid})

    def release(self) -> None:
        """End the hanging JWKS answers."""
        self._release.set()
        self._release = threading.Event()

    def close(self) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()
