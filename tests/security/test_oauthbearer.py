"""SASL/OAUTHBEARER against a real (small) OpenID Connect identity provider on 127.0.0.1:
confluent-kafka clients with sasl.oauthbearer.method=oidc log in and their principal is
the token's sub under ACLs; wrong audience, expired, badly signed, unsigned and malformed
tokens get Kafka's invalid_token answer; a rotated key is picked up; a JWKS endpoint that
hangs or serves garbage does not hold other logins up."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import KafkaError, Producer
from cryptography.hazmat.primitives.asymmetric import rsa

from pykfk.errors import ErrorCode
from pykfk.testing import BrokerProcess, RawClient
from tests.security.oidc import OidcIssuer

INVALID_TOKEN = b'{"status":"invalid_token"}'
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="admin-secret" user_admin="admin-secret";')


@pytest.fixture(scope="module")
def issuer(ca):
    """The identity provider over HTTPS, its certificate from the tests' CA."""
    idp = OidcIssuer.over_https(ca, "idp", audience="kafka")
    idp.clients.update({"producer-app": "p-secret", "stranger": "s-secret"})
    yield idp
    idp.close()


@pytest.fixture(scope="module")
def oauth_broker(tmp_path_factory, issuer, ca):
    broker = BrokerProcess(str(tmp_path_factory.mktemp("oauth") / "data"), {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "sasl.oauthbearer.jwks.endpoint.url": issuer.jwks_url,
        "ssl.truststore.location": str(ca.cert_path),  # trusted for the JWKS endpoint
        "sasl.oauthbearer.expected.audience": "kafka",
        "sasl.oauthbearer.expected.issuer": issuer.url,
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms": 0,
        "sasl.oauthbearer.clock.skew.seconds": 1,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
        "connection.failed.authentication.delay.ms": 20,
        "num.partitions": 1,
    }).start()
    yield broker
    broker.stop()


def bearer_login(port: int, token: str) -> tuple[object, object | None]:
    """(first SaslAuthenticate answer, the answer to the client's \\x01 after an error)."""
    raw = RawClient("127.0.0.1", port)
    try:
        assert raw.call(17, 1, {"mechanism": "OAUTHBEARER"}).error_code == ErrorCode.NONE
        first = raw.call(36, 1, {"auth_bytes": f"n,,\x01auth=Bearer {token}\x01\x01".encode()})
        second = None
        if first.error_code == ErrorCode.NONE and first.auth_bytes:
            second = raw.call(36, 1, {"auth_bytes": b"\x01"})
        return first, second
    finally:
        raw.close()


def accepted(port: int, token: str) -> bool:
    first, second = bearer_login(port, token)
    if second is None:
        return first.error_code == ErrorCode.NONE
    assert bytes(first.auth_bytes) == INVALID_TOKEN  # Kafka's challenge for a refused token
    assert second.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert second.error_message == INVALID_TOKEN.decode()
    return False


def oidc_settings(broker: BrokerProcess, issuer: OidcIssuer, client: str, secret: str) -> dict[str, str]:
    return {"https.ca.location": str(issuer.ca_file), "bootstrap.servers": f"127.0.0.1:{broker.ports['SASL_PLAINTEXT']}",
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": client,
            "sasl.oauthbearer.client.secret": secret, "sasl.oauthbearer.token.endpoint.url": issuer.token_url,
            "sasl.oauthbearer.scope": "kafka"}


def test_oidc_clients_log_in_as_their_sub_under_acls(oauth_broker, issuer):
    admin = RawClient("127.0.0.1", oauth_broker.ports["SASL_PLAINTEXT"])
    assert admin.call(17, 1, {"mechanism": "PLAIN"}).error_code == ErrorCode.NONE
    assert admin.call(36, 1, {"auth_bytes": b"\0admin\0admin-secret"}).error_code == ErrorCode.NONE
    answer = admin.call(30, 3, {"creations": [{
        "resource_type": 2, "resource_name": "oidc-", "resource_pattern_type": 4, "principal": "User:producer-app",
        "host": "*", "operation": 2, "permission_type": 3}]})
    assert answer.results[0].error_code == ErrorCode.NONE
    admin.close()
    topic = f"oidc-{uuid.uuid4().hex[:8]}"

    def produce(client: str, secret: str) -> list[KafkaError | None]:
        reports: list[KafkaError | None] = []
        producer = Producer({**oidc_settings(oauth_broker, issuer, client, secret), "message.timeout.ms": 10000})
        for i in range(3):
            producer.produce(topic, f"v{i}".encode(), on_delivery=lambda err, _msg: reports.append(err))
        producer.flush(20)
        return reports

    assert produce("producer-app", "p-secret") == [None, None, None]
    refused = produce("stranger", "s-secret")  # logs in, but User:stranger may not write
    assert refused and all(e is not None and e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for e in refused)


def test_a_client_keeps_producing_across_token_lifetimes(oauth_broker, issuer):
    """Sessions end with their token (KIP-368): librdkafka fetches a new token and logs in
    again on its connection, and the records keep flowing."""
    issuer.clients["short-lived"] = "sl-secret"
    issuer.lifetimes["short-lived"] = 2
    topic = f"oidc-{uuid.uuid4().hex[:8]}"
    admin = RawClient("127.0.0.1", oauth_broker.ports["SASL_PLAINTEXT"])
    assert admin.call(17, 1, {"mechanism": "PLAIN"}).error_code == ErrorCode.NONE
    assert admin.call(36, 1, {"auth_bytes": b"\0admin\0admin-secret"}).error_code == ErrorCode.NONE
    assert admin.call(30, 3, {"creations": [{
        "resource_type": 2, "resource_name": topic, "resource_pattern_type": 3, "principal": "User:short-lived",
        "host": "*", "operation": 2, "permission_type": 3}]}).results[0].error_code == ErrorCode.NONE
    admin.close()
    reports: list[KafkaError | None] = []
    producer = Producer({**oidc_settings(oauth_broker, issuer, "short-lived", "sl-secret"),
                         "message.timeout.ms": 10000})
    deadline = time.monotonic() + 4.5  # more than two token lifetimes
    while time.monotonic() < deadline:
        producer.produce(topic, b"x", on_delivery=lambda err, _msg: reports.append(err))
        producer.poll(0.25)
    assert producer.flush(20) == 0
    assert reports and all(e is None for e in reports), [e for e in reports if e is not None][:3]
    assert issuer.tokens_issued["short-lived"] >= 2


def test_bad_tokens_get_kafkas_invalid_token_answer(oauth_broker, issuer):
    port = oauth_broker.ports["SASL_PLAINTEXT"]
    first, _second = bearer_login(port, issuer.token("alice"))
    # The session lasts as long as the token: the client logs in again before (KIP-368).
    assert first.error_code == ErrorCode.NONE and 0 < first.session_lifetime_ms <= (issuer.lifetime_s + 1) * 1000
    now = int(time.time())
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    current_kid = issuer.keys[-1][0]
    bad = {
        "wrong audience": issuer.token("alice", aud="not-kafka"),
        "wrong issuer": issuer.token("alice", iss="https://elsewhere.example"),
        "expired": issuer.token("alice", exp=now - 3600, iat=now - 7200),
        "bad signature": issuer.token("alice", key=other_key, kid=current_kid),
        "unknown key": issuer.token("alice", key=other_key, kid="no-such-kid"),
        "unsigned": "eyJhbGciOiJub25lIn0." + issuer.token("alice").split(".")[1] + ".",  # {"alg":"none"}
        "no sub": issuer.token(""),
        "garbage": "not.a.jwt",
        "oversized": "x" * 100_000,
    }
    for what, token in bad.items():
        assert not accepted(port, token), what


def test_a_rotated_key_is_picked_up_and_the_old_one_dropped(oauth_broker, issuer):
    port = oauth_broker.ports["SASL_PLAINTEXT"]
    old_kid, old_key = issuer.keys[-1]
    old_token = issuer.token("alice")
    assert accepted(port, old_token)
    issuer.rotate()  # the JWKS now holds only the new key
    assert accepted(port, issuer.token("alice"))  # unknown kid: the broker fetches the JWKS again
    assert not accepted(port, issuer.token("alice", key=old_key, kid=old_kid))


def test_a_hanging_or_garbage_jwks_does_not_hold_other_logins(oauth_broker, issuer):
    port = oauth_broker.ports["SASL_PLAINTEXT"]
    known = issuer.token("alice")
    assert accepted(port, known)
    try:
        issuer.jwks_mode = "garbage"
        issuer.rotate(keep_old=True)
        assert not accepted(port, issuer.token("alice"))  # its key cannot be had
        assert accepted(port, known)  # the known keys stay

        issuer.jwks_mode = "hang"
        issuer.rotate(keep_old=True)
        results: dict[str, object] = {}
        waiting = threading.Thread(target=lambda: results.setdefault("new", accepted(port, issuer.token("alice"))))
        started = time.monotonic()
        waiting.start()
        time.sleep(0.2)  # the fetch for the new key now hangs
        assert accepted(port, known)
        known_took = time.monotonic() - started
        waiting.join(10)
        assert results == {"new": False} and time.monotonic() - started < 5
        assert known_took < 1.5
    finally:
        issuer.jwks_mode = "ok"
        issuer.release()
    deadline = time.monotonic() + 5
    while not accepted(port, issuer.token("alice")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert accepted(port, issuer.token("alice"))


def test_oauthbearer_without_a_jwks_is_refused_unless_unsecured_is_named(tmp_path):
    from pykfk.config import BrokerConfig, ConfigError
    from pykfk.security.oauth import UNSECURED_VALIDATOR
    from pykfk.server.session import ListenerSecurity

    base = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "OAUTHBEARER",
            "log.dirs": str(tmp_path)}
    config = BrokerConfig(base)
    with pytest.raises(ConfigError, match="sasl.oauthbearer.jwks.endpoint.url"):
        ListenerSecurity(config.listeners[0], config)
    unsecured = BrokerConfig({
        **base, "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class": UNSECURED_VALIDATOR})
    assert ListenerSecurity(unsecured.listeners[0], unsecured).bearer_validator.unsecured


def test_an_oauthbearer_inter_broker_login_needs_its_client_credentials(tmp_path):
    from pykfk.cluster.node import inter_broker_security
    from pykfk.config import BrokerConfig, ConfigError

    base = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path),
            "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER",
            "sasl.oauthbearer.token.endpoint.url": "http://127.0.0.1:1/token"}
    with pytest.raises(ConfigError, match="clientId and clientSecret"):
        inter_broker_security(BrokerConfig(base))
    jaas = ('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
            'clientId="broker" clientSecret="b-secret" scope="kafka";')
    security = inter_broker_security(BrokerConfig({
        **base, "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": jaas}))
    assert security.sasl_mechanism == "OAUTHBEARER" and security.bearer_token is not None


def test_pykfk_logs_in_with_oidc_client_credentials(oauth_broker, issuer, tmp_path):
    """The CLI's own OAUTHBEARER login (Kafka's client properties: the token endpoint and
    OAuthBearerLoginModule's clientId/clientSecret/scope), and ``pykfk token oidc``
    showing the principal brokers take from the token."""
    import json
    import subprocess

    from tests.cli.conftest import PYKFK

    def config(secret: str) -> str:
        path = tmp_path / f"oidc-{secret}.properties"
        path.write_text(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=OAUTHBEARER\n"
            f"sasl.oauthbearer.token.endpoint.url={issuer.token_url}\n"
            f"https.ca.location={issuer.ca_file}\n"
            "sasl.login.callback.handler.class=org.apache.kafka.common.security.oauthbearer."
            "OAuthBearerLoginCallbackHandler\n"
            "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            f'clientId="producer-app" clientSecret="{secret}" scope="kafka";\n')
        return str(path)

    def pykfk(secret: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*PYKFK, "-b", f"127.0.0.1:{oauth_broker.ports['SASL_PLAINTEXT']}",
                               "--command-config", config(secret), "-o", "json", *args],
                              capture_output=True, text=True, timeout=60, check=False)

    shown = pykfk("p-secret", "token", "oidc")
    assert shown.returncode == 0, shown.stderr
    seen = json.loads(shown.stdout)
    assert seen["principal"] == "User:producer-app" and seen["audience"] == ["kafka"] and seen["scopes"] == ["kafka"]
    assert "token" not in seen
    listed = pykfk("p-secret", "topic", "list")  # logged in as User:producer-app
    assert listed.returncode == 0, listed.stderr
    refused = pykfk("wrong", "topic", "list")
    assert refused.returncode != 0 and "401" in refused.stderr and "Traceback" not in refused.stderr


def test_a_bearer_session_is_renewed_on_its_connection(oauth_broker, issuer):
    """KIP-368 with tokens: before its token ends a client logs in again on the same
    connection with a new one, and is served past the first token's end; the new token
    must be the same principal's."""
    raw = RawClient("127.0.0.1", oauth_broker.ports["SASL_PLAINTEXT"])

    def login(token: str) -> object:
        assert raw.call(17, 1, {"mechanism": "OAUTHBEARER"}).error_code == ErrorCode.NONE
        return raw.call(36, 1, {"auth_bytes": f"n,,\x01auth=Bearer {token}\x01\x01".encode()})

    try:
        now = int(time.time())
        first = login(issuer.token("alice", exp=now + 1))
        assert first.error_code == ErrorCode.NONE and 0 < first.session_lifetime_ms <= 2000  # exp + 1 s skew
        renewed = login(issuer.token("alice"))
        assert renewed.error_code == ErrorCode.NONE and renewed.session_lifetime_ms > 60_000
        time.sleep(first.session_lifetime_ms / 1000 + 0.3)
        assert raw.call(3, 1, {"topics": []}).brokers  # the first token has ended; the session has not
        other = login(issuer.token("bob"))
        assert other.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    finally:
        raw.close()
