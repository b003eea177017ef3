"""A broker's own OAUTHBEARER login as Kafka 4.1 configures it (KIP-1139): the JWT
retriever named by ``sasl.oauthbearer.jwt.retriever.class``, the client credentials in
``sasl.oauthbearer.client.credentials.*`` and ``sasl.oauthbearer.scope``, all given per
listener and mechanism, against the test identity provider over HTTPS trusted through the
login's JAAS ``ssl.truststore.*`` options (where Kafka reads them); and the jwt-bearer
grant, an assertion signed with a private key file exchanged for a token."""

from __future__ import annotations

import asyncio
import json
import time

import jwt
import pytest
from confluent_kafka import Producer
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from pykfk.cluster.node import inter_broker_security
from pykfk.config import BrokerConfig, ConfigError
from pykfk.security.oauth_login import TokenEndpointError, check_login_token
from tests.security.oidc import JWT_BEARER, OidcIssuer

PACKAGE = "org.apache.kafka.common.security.oauthbearer."
LOGIN_HANDLER = PACKAGE + "OAuthBearerLoginCallbackHandler"
VALIDATOR = PACKAGE + "OAuthBearerValidatorCallbackHandler"
PREFIX = "listener.name.internal.oauthbearer."
LISTENERS = {"listeners": "CLIENT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
             "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
             "inter.broker.listener.name": "INTERNAL",
             "listener.name.internal.sasl.enabled.mechanisms": "OAUTHBEARER",
             "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER"}


@pytest.fixture(scope="module")
def idp(ca):
    """The identity provider over HTTPS (a certificate of the tests' CA for 127.0.0.1)."""
    issuer = OidcIssuer.over_https(ca, "idp-login", audience="kafka")
    issuer.clients.update({"broker": "b-secret", "id:with/odd": "s&cr=t"})
    yield issuer
    issuer.close()


def jaas(ca, **options: str) -> str:
    pairs = {"ssl.truststore.location": str(ca.cert_path), "ssl.truststore.type": "PEM", **options}
    return f"{PACKAGE}OAuthBearerLoginModule required " + " ".join(f'{k}="{v}"' for k, v in pairs.items()) + ";"


def login_config(idp, ca, jaas_text: str | None = None, **settings: object) -> BrokerConfig:
    return BrokerConfig({**LISTENERS,
                         PREFIX + "sasl.jaas.config": jaas_text if jaas_text is not None else jaas(ca),
                         PREFIX + "sasl.login.callback.handler.class": LOGIN_HANDLER,
                         PREFIX + "sasl.oauthbearer.token.endpoint.url": idp.token_url,
                         **{PREFIX + k: v for k, v in settings.items()}})


def get_token(cfg: BrokerConfig) -> str:
    security = inter_broker_security(cfg)
    assert security.bearer_token is not None
    return asyncio.run(security.bearer_token())


def test_two_brokers_replicate_with_tokens_fetched_over_https(tmp_path, zookeeper_server, idp, ca):
    """Kafka 4.1's names, listener- and mechanism-prefixed; the token endpoint's
    certificate trusted only through the login's JAAS options (the brokers have no trust
    store of their own, the JWKS is a file)."""
    from tests.cluster.conftest import Cluster

    jwks = tmp_path / "jwks.json"
    jwks.write_text(idp.jwks())
    idp.tokens_issued.clear()
    cluster = Cluster(str(tmp_path), zookeeper_server, 2, {
        **LISTENERS,
        PREFIX + "sasl.jaas.config": jaas(ca),
        PREFIX + "sasl.login.callback.handler.class": LOGIN_HANDLER,
        PREFIX + "sasl.server.callback.handler.class": VALIDATOR,
        PREFIX + "sasl.oauthbearer.jwt.retriever.class": PACKAGE + "ClientCredentialsJwtRetriever",
        PREFIX + "sasl.oauthbearer.jwt.validator.class": PACKAGE + "BrokerJwtValidator",
        PREFIX + "sasl.oauthbearer.token.endpoint.url": idp.token_url,
        PREFIX + "sasl.oauthbearer.client.credentials.client.id": "broker",
        PREFIX + "sasl.oauthbearer.client.credentials.client.secret": "b-secret",
        PREFIX + "sasl.oauthbearer.scope": "kafka",
        PREFIX + "sasl.oauthbearer.jwks.endpoint.url": jwks.as_uri(),
        "sasl.oauthbearer.expected.audience": "kafka",
        "sasl.oauthbearer.expected.issuer": idp.url,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:broker;User:ANONYMOUS",
    }).start()
    try:
        cluster.create_topic("over-https", 2, 2, **{"min.insync.replicas": 2})
        cluster.wait_for_full_isr("over-https", 2, timeout=20)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "message.timeout.ms": 15000})
        errors: list[object] = []
        for i in range(100):
            producer.produce("over-https", f"r{i}".encode(), partition=i % 2,
                             on_delivery=lambda err, _m: errors.append(err) if err else None)
        assert producer.flush(20) == 0
        assert not errors, errors[:3]
        assert all(cluster.isr("over-https", p) == [0, 1] for p in range(2))
        # Each broker got its token from the HTTPS endpoint with the 4.1 settings' scope.
        assert idp.tokens_issued.get("broker", 0) >= 2
        assert {"grant_type": "client_credentials", "scope": "kafka"} in idp.requests
        for broker in cluster.brokers.values():
            assert "Traceback" not in broker.log_text()
    finally:
        cluster.close()


def test_token_endpoint_certificate_is_checked(idp, ca, tmp_path):
    """Without the JAAS trust options the test CA is unknown: no token (a TLS failure
    named as such); a trust store naming another CA fails the same way."""
    settings = {"sasl.oauthbearer.client.credentials.client.id": "broker",
                "sasl.oauthbearer.client.credentials.client.secret": "b-secret",
                "sasl.login.retry.backoff.max.ms": 200}
    assert check_login_token(get_token(login_config(idp, ca, **settings))).principal == "broker"
    bare = f"{PACKAGE}OAuthBearerLoginModule required;"
    with pytest.raises(TokenEndpointError, match="CERTIFICATE_VERIFY_FAILED"):
        get_token(login_config(idp, ca, bare, **settings))
    from tests.security.certs import CertificateAuthority

    other = CertificateAuthority(tmp_path)
    with pytest.raises(TokenEndpointError, match="CERTIFICATE_VERIFY_FAILED"):
        get_token(login_config(idp, ca, jaas(ca, **{"ssl.truststore.location": str(other.cert_path)}), **settings))


def test_kafka_41_settings_come_before_the_jaas_options(idp, ca):
    """sasl.oauthbearer.client.credentials.* and .scope over clientId/clientSecret/scope;
    the JAAS options alone still work; header.urlencode encodes an id and secret with
    reserved characters."""
    wrong = jaas(ca, clientId="broker", clientSecret="not-it", scope="ignored")
    cfg = login_config(idp, ca, wrong, **{"sasl.oauthbearer.client.credentials.client.secret": "b-secret",
                                          "sasl.oauthbearer.scope": "kafka"})
    assert check_login_token(get_token(cfg)).principal == "broker"
    assert idp.requests[-1] == {"grant_type": "client_credentials", "scope": "kafka"}
    assert check_login_token(get_token(login_config(idp, ca, jaas(ca, clientId="broker", clientSecret="b-secret")))
                             ).principal == "broker"
    odd = login_config(idp, ca, None, **{"sasl.oauthbearer.client.credentials.client.id": "id:with/odd",
                                         "sasl.oauthbearer.client.credentials.client.secret": "s&cr=t",
                                         "sasl.oauthbearer.header.urlencode": "true"})
    assert check_login_token(get_token(odd)).principal == "id:with/odd"


@pytest.fixture(scope="module")
def assertion_keys(tmp_path_factory, idp):
    """An RSA key with a passphrase and an EC key, registered with the identity provider
    as the assertion issuers svc-rsa and svc-ec, written as PKCS#8 PEM files."""
    directory = tmp_path_factory.mktemp("assertion")
    files = {}
    for issuer, key, passphrase in (("svc-rsa", rsa.generate_private_key(public_exponent=65537, key_size=2048), "pw"),
                                    ("svc-ec", ec.generate_private_key(ec.SECP256R1()), None)):
        encryption = (serialization.BestAvailableEncryption(passphrase.encode()) if passphrase
                      else serialization.NoEncryption())
        path = directory / f"{issuer}.pem"
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption))
        idp.assertion_keys[issuer] = key.public_key()
        files[issuer] = path
    template = directory / "template.json"
    template.write_text(json.dumps({"header": {"typ": "JWT"}, "payload": {"tenant": "t1", "sub": "from-template"}}))
    files["template"] = template
    return files


def test_jwt_bearer_grant_with_a_signed_assertion(idp, ca, assertion_keys):
    """JwtBearerJwtRetriever: an assertion signed with the key file (RS256 with a
    passphrase, ES256), its claims from sasl.oauthbearer.assertion.claim.* over the
    template, exchanged at the HTTPS token endpoint for a token naming its sub."""
    for issuer, algorithm, extra in (("svc-rsa", "RS256", {"sasl.oauthbearer.assertion.private.key.passphrase": "pw"}),
                                     ("svc-ec", "ES256", {})):
        before = time.time()
        cfg = login_config(idp, ca, None, **{
            "sasl.oauthbearer.jwt.retriever.class": PACKAGE + "JwtBearerJwtRetriever",
            "sasl.oauthbearer.assertion.private.key.file": str(assertion_keys[issuer]),
            "sasl.oauthbearer.assertion.algorithm": algorithm,
            "sasl.oauthbearer.assertion.template.file": str(assertion_keys["template"]),
            "sasl.oauthbearer.assertion.claim.iss": issuer,
            "sasl.oauthbearer.assertion.claim.sub": "svc-broker",
            "sasl.oauthbearer.assertion.claim.aud": idp.url,
            "sasl.oauthbearer.assertion.claim.exp.seconds": 120,
            "sasl.oauthbearer.assertion.claim.jti.include": "true",
            "sasl.oauthbearer.scope": "kafka", **extra})
        assert check_login_token(get_token(cfg)).principal == "svc-broker"
        request = idp.requests[-1]
        assert (request["grant_type"], request["scope"]) == (JWT_BEARER, "kafka")
        header = jwt.get_unverified_header(request["assertion"])
        claims = jwt.decode(request["assertion"], idp.assertion_keys[issuer], algorithms=[algorithm], audience=idp.url)
        assert (header["alg"], header["typ"]) == (algorithm, "JWT")
        assert (claims["iss"], claims["sub"], claims["tenant"]) == (issuer, "svc-broker", "t1")
        assert claims["exp"] - claims["iat"] == 120 and claims["iat"] - claims["nbf"] == 60
        assert int(before) <= claims["iat"] <= time.time() and len(claims["jti"]) >= 16
    # Two assertions never share a jti.
    get_token(cfg)
    assert jwt.decode(idp.requests[-1]["assertion"], options={"verify_signature": False})["jti"] != claims["jti"]


def test_jwt_bearer_refusals(idp, ca, assertion_keys, tmp_path):
    """An assertion the identity provider does not accept (signed with a key it does not
    know for that issuer) fails at once, not retried; a pre-made assertion file is sent
    as it is; a key file that is missing or cannot be read stops the broker at start."""
    base = {"sasl.oauthbearer.jwt.retriever.class": PACKAGE + "JwtBearerJwtRetriever",
            "sasl.oauthbearer.assertion.claim.aud": idp.url, "sasl.oauthbearer.assertion.claim.sub": "svc-broker",
            "sasl.login.retry.backoff.max.ms": 5000}
    impostor = login_config(idp, ca, None, **base, **{
        "sasl.oauthbearer.assertion.private.key.file": str(assertion_keys["svc-ec"]),
        "sasl.oauthbearer.assertion.algorithm": "ES256", "sasl.oauthbearer.assertion.claim.iss": "svc-rsa"})
    started = time.monotonic()
    with pytest.raises(TokenEndpointError, match="400"):
        get_token(impostor)
    assert time.monotonic() - started < 2

    made = tmp_path / "assertion.jwt"
    key = serialization.load_pem_private_key(assertion_keys["svc-ec"].read_bytes(), password=None)
    now = int(time.time())
    made.write_text(jwt.encode({"iss": "svc-ec", "sub": "premade", "aud": idp.url, "iat": now, "exp": now + 60},
                               key, algorithm="ES256") + "\n")
    cfg = login_config(idp, ca, None, **base, **{"sasl.oauthbearer.assertion.file": str(made)})
    assert check_login_token(get_token(cfg)).principal == "premade"
    assert idp.requests[-1]["assertion"] == made.read_text().strip()

    missing = login_config(idp, ca, None, **base, **{
        "sasl.oauthbearer.assertion.private.key.file": str(tmp_path / "nowhere.pem")})
    with pytest.raises(ConfigError, match="nowhere.pem is not a readable file"):
        inter_broker_security(missing)
    locked = login_config(idp, ca, None, **base, **{
        "sasl.oauthbearer.assertion.private.key.file": str(assertion_keys["svc-rsa"])})  # no passphrase given
    with pytest.raises(ConfigError, match="assertion cannot be made"):
        inter_broker_security(locked)
    with pytest.raises(ConfigError, match="needs sasl.oauthbearer.assertion.private.key.file"):
        inter_broker_security(login_config(idp, ca, None, **base))


def test_unsupported_classes_are_refused_at_start(idp, ca):
    with pytest.raises(ConfigError, match="ClientJwtValidator does not check a token's signature"):
        BrokerConfig({**LISTENERS, PREFIX + "sasl.oauthbearer.jwt.validator.class": PACKAGE + "ClientJwtValidator"})
    with pytest.raises(ConfigError, match="Kafka's JWT retrievers .* not com.example.MyRetriever"):
        login_config(idp, ca, None, **{"sasl.oauthbearer.jwt.retriever.class": "com.example.MyRetriever"})
    with pytest.raises(ConfigError, match="client.credentials.client.id and .client.secret"):
        inter_broker_security(login_config(idp, ca, None))


def test_token_from_a_file_endpoint(idp, ca, tmp_path):
    """DefaultJwtRetriever with a file: endpoint, and FileJwtRetriever, read the token in
    that file at each fetch (a file rewritten by another tool gives the new token)."""
    path = tmp_path / "token.jwt"
    path.write_text(idp.token("filed") + "\n")
    for retriever in ("DefaultJwtRetriever", "FileJwtRetriever"):
        cfg = BrokerConfig({**LISTENERS, PREFIX + "sasl.jaas.config": jaas(ca),
                            PREFIX + "sasl.login.callback.handler.class": LOGIN_HANDLER,
                            PREFIX + "sasl.oauthbearer.jwt.retriever.class": PACKAGE + retriever,
                            "sasl.oauthbearer.token.endpoint.url": path.as_uri()})
        assert get_token(cfg) == path.read_text().strip()
    path.write_text(idp.token("rewritten"))
    assert check_login_token(get_token(cfg)).principal == "rewritten"
