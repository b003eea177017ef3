"""Delegation tokens (KIP-48): made, described, renewed and expired through the admin API
(raw requests: neither confluent-kafka nor kafka-python has these calls), used to log in
with SCRAM (Kafka's tokenauth extension, and confluent-kafka's plain SCRAM login where
the broker allows it), refused once expired, seen by every broker of a ZooKeeper cluster,
and hostile logins refused."""

from __future__ import annotations

import base64
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer

from pykfk.errors import ErrorCode
from pykfk.security.sasl import SaslClient
from pykfk.security.tokens import token_password
from pykfk.testing import BrokerProcess, RawClient, wait_until
from tests.security.conftest import client_settings
from tests.security.test_scram import _login_error as login_error

CREATE, RENEW, EXPIRE, DESCRIBE = 38, 39, 40, 41
CREATE_ACLS = 30
SECRET = "token-secret-for-tests"
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="admin-secret" user_admin="admin-secret" '
        'user_alice="alice-secret" user_bob="bob-secret" user_carol="carol-secret";')
TOKEN_SETTINGS = {
    "delegation.token.secret.key": SECRET,
    "delegation.token.max.lifetime.ms": 3_600_000,
    "delegation.token.expiry.time.ms": 600_000,
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "super.users": "User:admin",
    "allow.everyone.if.no.acl.found": "false",
    "connection.failed.authentication.delay.ms": 20,
    "delegation.token.expiry.check.interval.ms": 300,
}


@pytest.fixture(scope="module")
def token_broker(tmp_path_factory, ca):
    server = ca.issue("tokens", "localhost", server=True)
    broker = BrokerProcess(str(tmp_path_factory.mktemp("tokens") / "data"), {
        **TOKEN_SETTINGS,
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "ssl.keystore.location": str(server.both),
        "ssl.truststore.location": str(ca.cert_path),
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "delegation.token.scram.without.extension": "true",
        "num.partitions": 1,
    }).start()
    yield broker
    broker.stop()


def plain_login(port: int, user: str) -> RawClient:
    raw = RawClient("127.0.0.1", port)
    assert raw.call(17, 1, {"mechanism": "PLAIN"}).error_code == ErrorCode.NONE
    assert raw.call(36, 1, {"auth_bytes": f"\0{user}\0{user}-secret".encode()}).error_code == ErrorCode.NONE
    return raw


def scram_login(port: int, user: str, password: str, extensions: dict[str, str] | None = None,
                mechanism: str = "SCRAM-SHA-256") -> tuple[RawClient, object, list[bytes]]:
    """A SCRAM login on a new connection: (connection, last SaslAuthenticate answer, the
    client's messages)."""
    raw = RawClient("127.0.0.1", port)
    assert raw.call(17, 1, {"mechanism": mechanism}).error_code == ErrorCode.NONE
    client = SaslClient(mechanism, user, password, extensions)
    sent = [client.first()]
    answer = raw.call(36, 1, {"auth_bytes": sent[0]})
    if answer.error_code == ErrorCode.NONE:
        sent.append(client.step(answer.auth_bytes))
        answer = raw.call(36, 1, {"auth_bytes": sent[1]})
        if answer.error_code == ErrorCode.NONE:
            client.step(answer.auth_bytes)
    return raw, answer, sent


def token_login(port: int, token_id: str, hmac: bytes) -> tuple[RawClient, object]:
    raw, answer, _sent = scram_login(port, token_id, token_password(hmac), {"tokenauth": "true"})
    return raw, answer


def token_login_error(port: int, token_id: str, hmac: bytes) -> int:
    """The error code of a token login (on a connection then closed)."""
    raw, answer = token_login(port, token_id, hmac)
    raw.close()
    return answer.error_code


def closed_on_next_request(raw: RawClient, timeout_s: float = 5.0) -> bool:
    """Whether the broker closes ``raw`` at a request (Metadata) within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            raw.call(3, 1, {"topics": []})
        except (ConnectionError, OSError):
            return True
        time.sleep(0.1)
    return False


def create_token(raw: RawClient, renewers: tuple[str, ...] = (), owner: str | None = None,
                 max_lifetime_ms: int = -1, version: int = 3) -> object:
    body = {"owner_principal_type": "User" if owner else None, "owner_principal_name": owner,
            "renewers": [{"principal_type": "User", "principal_name": r} for r in renewers],
            "max_lifetime_ms": max_lifetime_ms}
    return raw.call(CREATE, version, body)


def described_ids(raw: RawClient, owners: list[str] | None = None) -> set[str]:
    body = {"owners": None if owners is None else [{"principal_type": "User", "principal_name": o} for o in owners]}
    answer = raw.call(DESCRIBE, 3, body)
    assert answer.error_code == ErrorCode.NONE
    return {t.token_id for t in answer.tokens}


def allow(raw: RawClient, principal: str, resource_type: int, name: str, operation: int, pattern: int = 3) -> None:
    answer = raw.call(CREATE_ACLS, 3, {"creations": [{
        "resource_type": resource_type, "resource_name": name, "resource_pattern_type": pattern,
        "principal": principal, "host": "*", "operation": operation, "permission_type": 3}]})
    assert answer.results[0].error_code == ErrorCode.NONE


def test_create_describe_renew_expire_with_kafkas_rules(token_broker):
    port = token_broker.ports["SASL_PLAINTEXT"]
    alice, bob, carol, admin = (plain_login(port, u) for u in ("alice", "bob", "carol", "admin"))
    before_ms = int(time.time() * 1000)
    made = create_token(alice, renewers=("bob",), max_lifetime_ms=120_000)
    assert made.error_code == ErrorCode.NONE
    assert (made.principal_type, made.principal_name, made.token_requester_principal_name) == ("User", "alice", "alice")
    assert before_ms <= made.issue_timestamp_ms <= made.expiry_timestamp_ms <= made.max_timestamp_ms
    assert made.max_timestamp_ms - made.issue_timestamp_ms == 120_000  # asked for less than the setting
    assert len(made.hmac) == 64  # HMAC-SHA512

    # Who sees it: owner and renewer; carol only once allowed DESCRIBE on the token.
    assert made.token_id in described_ids(alice) and made.token_id in described_ids(bob)
    assert made.token_id not in described_ids(carol)
    assert described_ids(alice, owners=["bob"]) == {made.token_id}  # bob renews it
    assert described_ids(alice, owners=[]) == set()
    allow(admin, "User:carol", 6, made.token_id, 8)  # DELEGATION_TOKEN, DESCRIBE
    assert made.token_id in described_ids(carol)

    # Renew: the renewer may, carol may not; never past the max lifetime.
    assert carol.call(RENEW, 2, {"hmac": made.hmac, "renew_period_ms": 1000}).error_code == \
        ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH
    renewed = bob.call(RENEW, 2, {"hmac": made.hmac, "renew_period_ms": 10**9})
    assert renewed.error_code == ErrorCode.NONE and renewed.expiry_timestamp_ms == made.max_timestamp_ms
    assert alice.call(RENEW, 1, {"hmac": b"x" * 64, "renew_period_ms": 1000}).error_code == \
        ErrorCode.DELEGATION_TOKEN_NOT_FOUND

    # Creating for another owner takes CREATE_TOKENS on that User; renewers must be Users.
    assert create_token(alice, owner="bob").error_code == ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED
    allow(admin, "User:alice", 7, "User:bob", 13)  # USER, CREATE_TOKENS
    for_bob = create_token(alice, owner="bob")
    assert for_bob.error_code == ErrorCode.NONE and for_bob.principal_name == "bob"
    assert for_bob.token_requester_principal_name == "alice"
    # DescribeTokens on User:bob lets carol see bob's tokens.
    assert for_bob.token_id not in described_ids(carol)
    allow(admin, "User:carol", 7, "User:bob", 14)  # USER, DESCRIBE_TOKENS
    assert for_bob.token_id in described_ids(carol)
    bad_renewer = alice.call(CREATE, 2, {"renewers": [{"principal_type": "Group", "principal_name": "g"}],
                                         "max_lifetime_ms": -1})
    assert bad_renewer.error_code == ErrorCode.INVALID_PRINCIPAL_TYPE

    # Not over PLAINTEXT (no authenticated principal).
    plain = RawClient("127.0.0.1", token_broker.ports["PLAINTEXT"])
    assert create_token(plain).error_code == ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    assert plain.call(DESCRIBE, 1, {"owners": None}).error_code == ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED

    # Expire: a period shortens it, a negative one removes it.
    shortened = alice.call(EXPIRE, 2, {"hmac": made.hmac, "expiry_time_period_ms": 60_000})
    assert shortened.error_code == ErrorCode.NONE
    assert shortened.expiry_timestamp_ms < made.max_timestamp_ms
    assert alice.call(EXPIRE, 1, {"hmac": made.hmac, "expiry_time_period_ms": -1}).error_code == ErrorCode.NONE
    assert made.token_id not in described_ids(admin)
    assert bob.call(RENEW, 2, {"hmac": made.hmac, "renew_period_ms": 1000}).error_code == \
        ErrorCode.DELEGATION_TOKEN_NOT_FOUND
    for raw in (alice, bob, carol, admin, plain):
        raw.close()


def test_token_logins_act_as_the_owner_and_end_with_the_token(token_broker, ca):
    port = token_broker.ports["SASL_PLAINTEXT"]
    alice = plain_login(port, "alice")
    made = create_token(alice)
    assert made.error_code == ErrorCode.NONE

    # Kafka's way: token id, base64 HMAC, tokenauth=true. The login acts as alice but
    # may not manage tokens (Kafka refuses token requests from token logins).
    raw, answer = token_login(port, made.token_id, made.hmac)
    assert answer.error_code == ErrorCode.NONE
    assert 0 < answer.session_lifetime_ms <= made.expiry_timestamp_ms - made.issue_timestamp_ms
    assert create_token(raw).error_code == ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    raw.close()
    # Without the extension the id is a user name, which has no credential... unless
    # delegation.token.scram.without.extension (set here) lets librdkafka in.
    assert token_login_error(port, made.token_id, b"\0" * 64) == ErrorCode.SASL_AUTHENTICATION_FAILED

    # confluent-kafka over SASL_SSL with the token as SCRAM user and password: it
    # produces and consumes as alice, under alice's ACLs.
    admin = plain_login(port, "admin")
    allow(admin, "User:alice", 2, "tokens-", 2, pattern=4)  # TOPIC tokens-*, ALL
    allow(admin, "User:alice", 3, "token-group", 2)  # GROUP, ALL
    admin.close()
    settings = client_settings(token_broker, ca, "SASL_SSL", mechanism="SCRAM-SHA-512", user=made.token_id,
                               password=token_password(made.hmac))
    topic = f"tokens-{uuid.uuid4().hex[:8]}"
    producer = Producer(settings)
    for i in range(10):
        producer.produce(topic, f"r{i}".encode())
    assert producer.flush(20) == 0
    consumer = Consumer({**settings, "group.id": "token-group", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(values) < 10 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    assert sorted(values) == sorted(f"r{i}".encode() for i in range(10))

    # A connection logged in with a token is closed once the token is removed.
    doomed = create_token(alice)
    raw, answer = token_login(port, doomed.token_id, doomed.hmac)
    assert answer.error_code == ErrorCode.NONE and not closed_on_next_request(raw, 0.3)
    assert alice.call(EXPIRE, 2, {"hmac": doomed.hmac, "expiry_time_period_ms": -1}).error_code == ErrorCode.NONE
    assert closed_on_next_request(raw)
    raw.close()

    # Expired (a short period, then past it): every new login is refused, with either client.
    assert alice.call(EXPIRE, 2, {"hmac": made.hmac, "expiry_time_period_ms": 500}).error_code == ErrorCode.NONE
    time.sleep(0.7)
    assert token_login_error(port, made.token_id, made.hmac) == ErrorCode.SASL_AUTHENTICATION_FAILED
    late = login_error(settings)
    assert late is not None and late.code() == KafkaError._AUTHENTICATION
    alice.close()


def test_tokens_survive_a_restart_and_expired_ones_stay_dead(token_broker):
    port = token_broker.ports["SASL_PLAINTEXT"]
    alice = plain_login(port, "alice")
    kept, ended = create_token(alice), create_token(alice)
    assert alice.call(EXPIRE, 2, {"hmac": ended.hmac, "expiry_time_period_ms": -1}).error_code == ErrorCode.NONE
    alice.close()
    token_broker.restart()
    port = token_broker.ports["SASL_PLAINTEXT"]
    assert token_login_error(port, kept.token_id, kept.hmac) == ErrorCode.NONE
    assert token_login_error(port, ended.token_id, ended.hmac) == ErrorCode.SASL_AUTHENTICATION_FAILED


def test_expired_tokens_are_removed_from_the_store(token_broker):
    """delegation.token.expiry.check.interval.ms: a token past its max lifetime leaves
    the embedded store's file (Kafka's expired-token task), a live one stays."""
    import json
    import os

    path = os.path.join(token_broker.log_dir, "pykfk-metadata.json")

    def stored() -> set[str]:
        with open(path, encoding="utf-8") as f:
            return set(json.load(f).get("delegation_tokens", {}))

    alice = plain_login(token_broker.ports["SASL_PLAINTEXT"], "alice")
    short, kept = create_token(alice, max_lifetime_ms=1000), create_token(alice)
    alice.close()
    assert {short.token_id, kept.token_id} <= stored()
    wait_until(lambda: short.token_id not in stored(), 10, "the expired token removed")
    assert kept.token_id in stored()
    assert token_login_error(token_broker.ports["SASL_PLAINTEXT"], short.token_id, short.hmac) == \
        ErrorCode.SASL_AUTHENTICATION_FAILED


def test_hostile_token_logins_are_refused(token_broker):
    port = token_broker.ports["SASL_PLAINTEXT"]
    alice = plain_login(port, "alice")
    made = create_token(alice)
    # A recorded login replayed on a new connection: the broker's nonce differs.
    raw, answer, sent = scram_login(port, made.token_id, token_password(made.hmac), {"tokenauth": "true"})
    assert answer.error_code == ErrorCode.NONE
    raw.close()
    replay = RawClient("127.0.0.1", port)
    assert replay.call(17, 1, {"mechanism": "SCRAM-SHA-256"}).error_code == ErrorCode.NONE
    assert replay.call(36, 1, {"auth_bytes": sent[0]}).error_code == ErrorCode.NONE
    assert replay.call(36, 1, {"auth_bytes": sent[1]}).error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    replay.close()
    # An id that names no token, an absurd one, a malformed extension.
    for token_id in ("no-such-token", "../../config/users/admin", "x" * 10_000, "nul\0byte", "é" * 30):
        assert token_login_error(port, token_id, made.hmac) == ErrorCode.SASL_AUTHENTICATION_FAILED
    bad = RawClient("127.0.0.1", port)
    assert bad.call(17, 1, {"mechanism": "SCRAM-SHA-256"}).error_code == ErrorCode.NONE
    answer = bad.call(36, 1, {"auth_bytes": f"n,,n={made.token_id},r=abc,tokenauth".encode()})
    assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    bad.close()
    # Malformed token requests close the connection (Kafka's way); the broker goes on.
    mangled = plain_login(port, "alice")
    mangled.sock.sendall(b"\x00\x00\x00\x0a\x00\x26\x00\x03\x00\x00\x00\x07\xff\xff")
    assert mangled.is_closed_by_peer()
    assert described_ids(alice) >= {made.token_id}
    alice.close()


def test_a_token_made_through_one_broker_works_on_all(tmp_path, zookeeper_server):
    from tests.cluster.conftest import Cluster

    overrides = {**TOKEN_SETTINGS, "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                 "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS, "inter.broker.listener.name": "PLAINTEXT"}
    cluster = Cluster(str(tmp_path), zookeeper_server, 3, overrides).start()
    try:
        brokers = list(cluster.brokers.values())
        alice = plain_login(brokers[0].ports["SASL_PLAINTEXT"], "alice")
        made = create_token(alice, renewers=("bob",))
        assert made.error_code == ErrorCode.NONE
        data, _stat = cluster.zk.get(cluster.path(f"/delegation_token/tokens/{made.token_id}"))
        assert b'"owner":"User%3Aalice"' in data and b"hmac" not in data.lower()
        for broker in brokers:
            assert token_login_error(broker.ports["SASL_PLAINTEXT"], made.token_id, made.hmac) == ErrorCode.NONE
        logged_in, answer = token_login(brokers[0].ports["SASL_PLAINTEXT"], made.token_id, made.hmac)
        assert answer.error_code == ErrorCode.NONE
        bob = plain_login(brokers[2].ports["SASL_PLAINTEXT"], "bob")
        assert bob.call(EXPIRE, 2, {"hmac": made.hmac, "expiry_time_period_ms": -1}).error_code == ErrorCode.NONE
        assert closed_on_next_request(logged_in)  # broker 0 hears of it through ZooKeeper
        logged_in.close()
        assert token_login_error(brokers[1].ports["SASL_PLAINTEXT"], made.token_id, made.hmac) == \
            ErrorCode.SASL_AUTHENTICATION_FAILED
        # A token past its max lifetime is removed from ZooKeeper by the brokers' expiry check.
        short = create_token(alice, max_lifetime_ms=1000)
        assert cluster.zk.exists(cluster.path(f"/delegation_token/tokens/{short.token_id}"))
        wait_until(lambda: not cluster.zk.exists(cluster.path(f"/delegation_token/tokens/{short.token_id}")), 10,
                   "the expired token's znode removed")
        alice.close()
        bob.close()
    finally:
        cluster.close()


def test_pykfk_token_commands(token_broker, tmp_path):
    import json
    import subprocess

    from tests.cli.conftest import PYKFK

    config = tmp_path / "alice.properties"
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                      "sasl.username=alice\nsasl.password=alice-secret\n")
    bootstrap = f"127.0.0.1:{token_broker.ports['SASL_PLAINTEXT']}"

    def pykfk(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*PYKFK, "-b", bootstrap, "--command-config", str(config), "-o", "json", *args],
                              capture_output=True, text=True, timeout=60, check=False)

    made = pykfk("token", "create", "--renewer", "bob", "--max-life", "1h")
    assert made.returncode == 0, made.stderr
    token = json.loads(made.stdout)
    assert token["owner"] == "User:alice" and token["renewers"] == ["User:bob"]
    assert token_login_error(token_broker.ports["SASL_PLAINTEXT"], token["token_id"],
                             base64.b64decode(token["hmac"])) == ErrorCode.NONE
    listed = pykfk("token", "list", "--owner", "User:bob")
    assert listed.returncode == 0 and token["token_id"] in {t["token_id"] for t in json.loads(listed.stdout)}
    assert pykfk("token", "renew", "--hmac", token["hmac"], "--period", "10m").returncode == 0
    # The token as the CLI's own login (Kafka's ScramLoginModule with tokenauth="true"):
    # it acts as alice, but a token login may not manage tokens (Kafka's rule).
    token_config = tmp_path / "token.properties"
    token_config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="{}" password="{}" tokenauth="true";\n'.format(token["token_id"], token["hmac"]))
    as_token = subprocess.run([*PYKFK, "-b", bootstrap, "--command-config", str(token_config), "-o", "json",
                               "topic", "list"], capture_output=True, text=True, timeout=60, check=False)
    assert as_token.returncode == 0, as_token.stderr
    refused = subprocess.run([*PYKFK, "-b", bootstrap, "--command-config", str(token_config), "token", "list"],
                             capture_output=True, text=True, timeout=60, check=False)
    assert refused.returncode == 1 and "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED" in refused.stderr, refused.stderr
    assert pykfk("token", "expire", "--hmac", token["hmac"]).returncode == 0
    gone = pykfk("token", "renew", "--hmac", token["hmac"])
    assert gone.returncode == 1 and "Traceback" not in gone.stderr and "DELEGATION_TOKEN_NOT_FOUND" in gone.stderr
    assert pykfk("token", "renew", "--hmac", "not base64!").returncode == 2
