"""OAUTHBEARER without a broker: the client message, the principal claim, clock skew,
unsecured tokens, the authorization id, and a JWKS source whose fetches fail."""

from __future__ import annotations

import asyncio
import json
import time

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from pykfk.security.oauth import (
    INVALID_TOKEN,
    JwksKeys,
    OAuthBearerServer,
    TokenRejected,
    TokenValidator,
    parse_client_response,
)
from pykfk.security.sasl import AuthenticationError

KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
JWKS = json.dumps({"keys": [{**RSAAlgorithm.to_jwk(KEY.public_key(), as_dict=True), "kid": "k1"}]}).encode()


def _token(**claims):
    now = int(time.time())
    return jwt.encode({"sub": "alice", "iat": now, "exp": now + 60, **claims}, KEY, algorithm="RS256",
                      headers={"kid": "k1"})


def _keys(answers):
    """A JWKS source answering from ``answers`` (bytes, or an exception to raise)."""
    pending = list(answers)

    def fetch():
        answer = pending.pop(0) if len(pending) > 1 else pending[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    return JwksKeys("https://idp.invalid/jwks", refresh_ms=3_600_000, backoff_ms=0, fetch=fetch)


def test_client_messages():
    assert parse_client_response(b"n,,\x01auth=Bearer abc\x01\x01") == ("", "abc", {})
    assert parse_client_response(b"n,a=alice,\x01auth=Bearer abc\x01traceId=7\x01\x01") == (
        "alice", "abc", {"traceId": "7"})
    for bad in (b"", b"n,,auth=Bearer abc", b"n,,\x01auth=Basic abc\x01\x01", b"n,,\x01auth=Bearer \x01\x01",
                b"y,,\x01auth=Bearer abc\x01\x01", b"\xff\xfe"):
        with pytest.raises(TokenRejected):
            parse_client_response(bad)


def test_principal_claim_and_clock_skew():
    async def run():
        keys = _keys([JWKS])
        custom = TokenValidator(keys, sub_claim="client_id", clock_skew_s=30)
        assert (await custom.validate(_token(client_id="svc-7")))[0] == "svc-7"
        with pytest.raises(TokenRejected):
            await custom.validate(_token())  # no client_id claim
        skewed = TokenValidator(keys, clock_skew_s=30)
        now = int(time.time())
        assert (await skewed.validate(_token(exp=now - 10)))[0] == "alice"  # within the skew
        with pytest.raises(TokenRejected):
            await skewed.validate(_token(exp=now - 60))
        with pytest.raises(TokenRejected):
            await skewed.validate(_token(iat=now + 120))  # issued in the future

    asyncio.run(run())


def test_unsecured_tokens_only_when_enabled():
    unsigned = jwt.encode({"sub": "dev", "exp": int(time.time()) + 60}, None, algorithm="none")

    async def run():
        assert (await TokenValidator(None, unsecured=True).validate(unsigned))[0] == "dev"
        with pytest.raises(TokenRejected):
            await TokenValidator(_keys([JWKS])).validate(unsigned)

    asyncio.run(run())


def test_failed_fetches_keep_the_known_keys():
    async def run():
        keys = _keys([JWKS, OSError("connection refused"), b"<html>", JWKS])
        validator = TokenValidator(keys)
        assert (await validator.validate(_token()))[0] == "alice"
        for _ in range(2):  # unknown key ids make it fetch again, and fail
            with pytest.raises(TokenRejected):
                await validator.validate(jwt.encode({"sub": "a", "iat": int(time.time()), "exp": int(time.time()) + 60}, KEY,
                                                    algorithm="RS256", headers={"kid": "k2"}))
            assert (await validator.validate(_token()))[0] == "alice"

    asyncio.run(run())


def test_kafkas_error_exchange_and_authorization_id():
    async def run():
        validator = TokenValidator(_keys([JWKS]))
        server = OAuthBearerServer(validator.validate, AuthenticationError)
        assert await server.step(b"n,,\x01auth=Bearer nonsense\x01\x01") == INVALID_TOKEN.encode()
        with pytest.raises(AuthenticationError, match="invalid_token"):
            await server.step(b"\x01")
        other = OAuthBearerServer(validator.validate, AuthenticationError)
        with pytest.raises(AuthenticationError, match="authorization id"):
            await other.step(f"n,a=bob,\x01auth=Bearer {_token()}\x01\x01".encode())
        good = OAuthBearerServer(validator.validate, AuthenticationError)
        assert await good.step(f"n,a=alice,\x01auth=Bearer {_token()}\x01\x01".encode()) == b""
        assert good.complete and good.user == "alice"

    asyncio.run(run())


def test_scope_claims_issued_at_and_required_scopes():
    """Kafka's validator: iat required, scopes (a string is one scope, a list several)
    non-blank and none twice under sasl.oauthbearer.scope.claim.name; required scopes
    only with the unsecured validator, whose refusal is insufficient_scope."""
    async def run():
        validator = TokenValidator(_keys([JWKS]), scope_claim="scp")
        assert (await validator.validate(_token(scp=["read", "write"])))[0] == "alice"
        assert (await validator.validate(_token(scp="read write")))[0] == "alice"  # one scope, as Kafka reads it
        assert (await validator.validate(_token(scope=["", ""])))[0] == "alice"  # not the scope claim here
        for bad in (_token(scp=["read", "read"]), _token(scp=["read", " "]), _token(scp=[7]), _token(iat=None)):
            with pytest.raises(TokenRejected):
                await validator.validate(bad)

        now = int(time.time())
        unsecured = TokenValidator(None, unsecured=True, required_scope=["kafka.write"])
        granted = jwt.encode({"sub": "dev", "exp": now + 60, "scope": "kafka.read kafka.write"}, None, algorithm="none")
        assert (await unsecured.validate(granted))[0] == "dev"
        lacking = jwt.encode({"sub": "dev", "exp": now + 60, "scope": "kafka.read"}, None, algorithm="none")
        with pytest.raises(TokenRejected) as refused:
            await unsecured.validate(lacking)
        assert refused.value.scope == "kafka.write"
        server = OAuthBearerServer(unsecured.validate, AuthenticationError)
        answer = await server.step(f"n,,\x01auth=Bearer {lacking}\x01\x01".encode())
        assert answer == b'{"status":"insufficient_scope", "scope":"kafka.write"}'  # Kafka's spelling
        with pytest.raises(AuthenticationError, match="insufficient_scope"):
            await server.step(b"\x01")

    asyncio.run(run())


def test_unsecured_validator_options_from_the_listener_jaas(tmp_path):
    from pykfk.config import BrokerConfig
    from pykfk.security.oauth import UNSECURED_VALIDATOR
    from pykfk.server.session import ListenerSecurity

    config = BrokerConfig({
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "OAUTHBEARER", "log.dirs": str(tmp_path),
        "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class": UNSECURED_VALIDATOR,
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            'unsecuredValidatorRequiredScope="kafka.read kafka.write" unsecuredValidatorPrincipalClaimName="client";'})
    validator = ListenerSecurity(config.listeners[0], config).bearer_validator
    assert validator.required_scope == ["kafka.read", "kafka.write"] and validator.sub_claim == "client"


def test_a_login_token_is_refreshed_at_kafkas_time_and_kept_while_the_endpoint_fails():
    from pykfk.security.oauth_login import (
        BearerTokenSource,
        RefreshSettings,
        TokenEndpointError,
        refresh_time_ms,
        unsecured_token,
    )

    kafka = RefreshSettings()  # factor 0.8, jitter 0.05, min period 60 s, buffer 300 s
    hour = 3_600_000
    assert refresh_time_ms(0, 0, hour, kafka, lambda: 0.0) == int(0.8 * hour)
    assert refresh_time_ms(0, 0, hour, kafka, lambda: 1.0) == int(0.85 * hour)
    assert refresh_time_ms(0, 0, 500_000, kafka, lambda: 0.0) == 200_000  # not within the 300 s buffer
    assert refresh_time_ms(0, -3_000_000, 600_000, kafka, lambda: 0.0) == 60_000  # not before the min period
    assert refresh_time_ms(0, 0, 10_000, kafka, lambda: 0.0) == 8_000  # too short for both: 80 % of it

    answers: list[object] = [unsecured_token("broker", 3), TokenEndpointError("503"), TokenEndpointError("503")]

    def fetch() -> str:
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, Exception):
            raise answer
        return str(answer)

    async def run():
        source = BearerTokenSource(fetch, retry_backoff_ms=10, retry_backoff_max_ms=50)
        first = await source.token()
        assert await source.token() == first and source.fetches == 1  # before its refresh time
        assert source.current is not None and source.refresh_at_ms < source.current.expiry_ms
        await asyncio.sleep(source.refresh_at_ms / 1000 - time.time() + 0.05)  # due, and the endpoint fails
        assert await source.token() == first  # kept while it lasts
        await asyncio.sleep(source.current.expiry_ms / 1000 - time.time() + 0.05)
        with pytest.raises(TokenEndpointError):
            await source.token()  # expired, and no new one

    asyncio.run(run())
