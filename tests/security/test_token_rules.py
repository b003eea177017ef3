"""The rules of delegation tokens without a broker: Kafka's stored JSON, HMACs, lifetimes,
who may renew, expire and see a token, and SCRAM's tokenauth extension."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

from pykfk.errors import ErrorCode
from pykfk.security import tokens
from pykfk.security.scram import ScramClient, ScramServer

SETTINGS = tokens.TokenSettings("secret", max_lifetime_ms=10_000, renew_ms=1_000)


def test_stored_json_is_kafkas_and_reads_back():
    token = tokens.TokenInfo("abc", "User:al ice", "User:admin", ("User:bob",), 1, 2, 3)
    doc = json.loads(token.to_json())
    assert doc == {"version": 3, "owner": "User%3Aal%20ice", "tokenRequester": "User%3Aadmin",
                   "renewers": ["User%3Abob"], "issueTimestamp": 1, "maxTimestamp": 3, "expiryTimestamp": 2,
                   "tokenId": "abc"}
    assert tokens.TokenInfo.from_json(token.to_json()) == token


def test_hmac_is_hmac_sha512_of_the_id_and_the_password_its_base64():
    mac = tokens.token_hmac("secret", "abc")
    assert mac == hmac.new(b"secret", b"abc", hashlib.sha512).digest()
    assert tokens.token_password(mac) == base64.b64encode(mac).decode()


def test_lifetimes_renewal_and_expiry():
    token = tokens.create(SETTINGS, "User:alice", "User:alice", ["User:bob", "User:bob"], 60_000, now_ms=100)
    assert (token.issue_ms, token.expiry_ms, token.max_ms, token.renewers) == (100, 1_100, 10_100, ("User:bob",))
    assert tokens.create(SETTINGS, "User:a", "User:a", [], 5_000, now_ms=0).max_ms == 5_000
    code, renewed = tokens.renew(SETTINGS, token, "User:bob", -1, now_ms=500)
    assert code == ErrorCode.NONE and renewed is not None and renewed.expiry_ms == 1_500
    assert tokens.renew(SETTINGS, token, "User:bob", 10**9, now_ms=500)[1].expiry_ms == 10_100
    assert tokens.renew(SETTINGS, token, "User:eve", 1, now_ms=500)[0] == ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH
    assert tokens.renew(SETTINGS, token, "User:bob", 1, now_ms=2_000)[0] == ErrorCode.DELEGATION_TOKEN_EXPIRED
    assert tokens.renew(SETTINGS, None, "User:bob", 1, now_ms=0)[0] == ErrorCode.DELEGATION_TOKEN_NOT_FOUND
    assert tokens.expire(token, "User:alice", 10, now_ms=500)[1].expiry_ms == 510
    assert tokens.expire(token, "User:alice", 10, now_ms=5_000)[0] == ErrorCode.DELEGATION_TOKEN_EXPIRED
    assert tokens.expire(token, "User:alice", -1, now_ms=5_000)[0] == ErrorCode.NONE  # removal always works


def test_who_sees_a_token():
    token = tokens.TokenInfo("t", "User:alice", "User:admin", ("User:bob",), 0, 1, 2)

    def no(_name: str) -> bool:
        return False

    assert tokens.visible(token, "User:bob", None, no, no)
    assert tokens.visible(token, "User:admin", None, no, no)
    assert not tokens.visible(token, "User:eve", None, no, no)
    assert tokens.visible(token, "User:eve", None, lambda i: i == "t", no)
    assert tokens.visible(token, "User:eve", None, no, lambda o: o == "User:alice")
    assert not tokens.visible(token, "User:alice", ["User:carol"], no, no)
    assert tokens.requests_allowed("SASL_SSL", "User:a", False)
    assert tokens.requests_allowed("SSL", "User:CN=a", False)
    assert not tokens.requests_allowed("SSL", "User:ANONYMOUS", False)
    assert not tokens.requests_allowed("PLAINTEXT", "User:ANONYMOUS", False)
    assert not tokens.requests_allowed("SASL_SSL", "User:a", True)


def test_scram_carries_the_tokenauth_extension():
    client = ScramClient("SCRAM-SHA-256", "tok", "pw", {"tokenauth": "true"})
    server = ScramServer("SCRAM-SHA-256")
    assert server.parse_first(client.first()) == "tok"
    assert server.extensions == {"tokenauth": "true"}
