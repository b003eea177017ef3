"""Brokers of a ZooKeeper cluster that log in to each other with OAUTHBEARER: each gets its
tokens from the test identity provider's token endpoint (client credentials, Kafka's
settings), the others check them against its JWKS, and replication goes on across several
token lifetimes (the brokers fetch new tokens and log in again on their connections)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from pykfk.testing import wait_until
from tests.security.oidc import OidcIssuer

TOKEN_LIFETIME_S = 4
LOGIN_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"


@pytest.fixture(scope="module")
def idp():
    issuer = OidcIssuer(audience="kafka")
    issuer.clients["broker"] = "b-secret"
    issuer.lifetimes["broker"] = TOKEN_LIFETIME_S
    yield issuer
    issuer.close()


def test_replication_over_oauthbearer_across_token_lifetimes(tmp_path, zookeeper_server, idp):
    from tests.cluster.conftest import Cluster

    cluster = Cluster(str(tmp_path), zookeeper_server, 3, {
        "listeners": "CLIENT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "listener.name.internal.sasl.enabled.mechanisms": "OAUTHBEARER",
        "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER",
        "listener.name.internal.oauthbearer.sasl.jaas.config":
            'org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
            'clientId="broker" clientSecret="b-secret" scope="kafka";',
        "listener.name.internal.oauthbearer.sasl.login.callback.handler.class": LOGIN_HANDLER,
        "listener.name.internal.oauthbearer.sasl.server.callback.handler.class": VALIDATOR,
        "sasl.oauthbearer.token.endpoint.url": idp.token_url,
        "sasl.oauthbearer.jwks.endpoint.url": idp.jwks_url,
        "sasl.oauthbearer.expected.audience": "kafka",
        "sasl.oauthbearer.expected.issuer": idp.url,
        "sasl.oauthbearer.clock.skew.seconds": 1,
        # Followers fetch as the token's sub, User:broker: without that principal they
        # would get CLUSTER_AUTHORIZATION_FAILED and fall out of the ISR.
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:broker;User:ANONYMOUS",
        "replica.lag.time.max.ms": 3000,
    }).start()
    try:
        cluster.create_topic("ib", 3, 3, **{"min.insync.replicas": 2})
        cluster.wait_for_full_isr("ib", 3)
        # A new topic's ISR is full from the start, before any follower has connected:
        # wait for every broker's first login (each follows two leaders) rather than race it.
        wait_until(lambda: idp.tokens_issued.get("broker", 0) >= 3, 15,
                   "a token fetched by every broker")
        fetched_at_start = idp.tokens_issued["broker"]

        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5,
                             "message.timeout.ms": 20000})
        errors: list[object] = []
        sent = 0
        shrunk: list[tuple[int, list[int]]] = []
        deadline = time.monotonic() + 2.5 * TOKEN_LIFETIME_S  # sessions end with their tokens
        while time.monotonic() < deadline:
            for _ in range(20):
                producer.produce("ib", f"r{sent}".encode(), on_delivery=lambda err, _m: errors.append(err) if err else None)
                sent += 1
            producer.poll(0.2)
            shrunk.extend((p, isr) for p in range(3) if len(isr := cluster.isr("ib", p)) < 3)
        assert producer.flush(30) == 0
        assert not errors, errors[:3]
        assert not shrunk, shrunk[:3]  # no follower fell behind while tokens were replaced
        # Each broker fetched new tokens as the old ones neared their end.
        assert idp.tokens_issued["broker"] >= fetched_at_start + 3
        for broker in cluster.brokers.values():
            assert "Traceback" not in broker.log_text()
        wait_until(lambda: all(cluster.isr("ib", p) == [0, 1, 2] for p in range(3)), 10, "full ISR")
    finally:
        cluster.close()


def test_wrong_client_credentials_get_no_token(idp):
    """A client secret the identity provider refuses (401) fails at once, not retried."""
    import asyncio

    from pykfk.security.oauth_login import (
        BearerTokenSource,
        ClientCredentials,
        TokenEndpointError,
        fetch_access_token,
    )

    credentials = ClientCredentials(idp.token_url, "broker", "wrong-secret", "kafka")
    source = BearerTokenSource(lambda: fetch_access_token(credentials), retry_backoff_max_ms=5000)
    started = time.monotonic()
    with pytest.raises(TokenEndpointError, match="401"):
        asyncio.run(source.token())
    assert time.monotonic() - started < 2
