"""Every security protocol on one broker, driven by confluent-kafka, kafka-python and raw
frames: TLS, SASL/PLAIN over plain TCP and over TLS, Metadata per listener, failed
logins and requests before a login."""

from __future__ import annotations

import struct
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient

from pykfk.errors import ErrorCode
from pykfk.testing import RawClient
from tests.security.conftest import LISTENERS, client_settings

METADATA, SASL_HANDSHAKE, SASL_AUTHENTICATE, API_VERSIONS = 3, 17, 36, 18


def _produce(settings: dict[str, str], topic: str, values: list[bytes]) -> None:
    producer = Producer({**settings, "linger.ms": 0})
    errors: list[object] = []
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, _msg: errors.append(err) if err else None)
    assert producer.flush(30) == 0
    assert errors == []


def _consume(settings: dict[str, str], topic: str, count: int, timeout_s: float = 30) -> list[bytes]:
    consumer = Consumer({**settings, "group.id": f"g-{topic}-{time.monotonic_ns()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            got.append(message.value())
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("listener", LISTENERS)
def test_confluent_kafka_produces_and_consumes_on_every_listener(secure_broker, ca, listener):
    settings = client_settings(secure_broker, ca, listener)
    topic = f"t-{listener.lower()}"
    values = [f"{listener}-{i}".encode() * 50 for i in range(200)]
    _produce(settings, topic, values)
    assert sorted(_consume(settings, topic, len(values))) == sorted(values)


@pytest.mark.parametrize("listener", LISTENERS)
def test_metadata_names_the_listener_the_client_came_in_on(secure_broker, ca, listener):
    admin = AdminClient(client_settings(secure_broker, ca, listener))
    brokers = admin.list_topics(timeout=20).brokers
    assert [(b.host, b.port) for b in brokers.values()] == [("127.0.0.1", secure_broker.ports[listener])]


def test_records_written_over_one_listener_are_read_over_another(secure_broker, ca):
    values = [b"x" * 3000 + bytes([i]) for i in range(100)]  # several KB per fetch, over TLS
    _produce(client_settings(secure_broker, ca, "SASL_PLAINTEXT"), "across", values)
    assert sorted(_consume(client_settings(secure_broker, ca, "SSL"), "across", 100)) == sorted(values)


def test_kafka_python_over_ssl_and_sasl_plain(secure_broker, ca):
    from kafka import KafkaConsumer, KafkaProducer

    ssl_settings = {"bootstrap_servers": f"127.0.0.1:{secure_broker.ports['SSL']}", "security_protocol": "SSL",
                    "ssl_cafile": str(ca.cert_path)}
    sasl_settings = {"bootstrap_servers": f"127.0.0.1:{secure_broker.ports['SASL_SSL']}",
                     "security_protocol": "SASL_SSL", "ssl_cafile": str(ca.cert_path),
                     "sasl_mechanism": "PLAIN", "sasl_plain_username": "admin", "sasl_plain_password": "admin-secret"}
    producer = KafkaProducer(**ssl_settings)
    for i in range(50):
        producer.send("kp", f"v{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer("kp", auto_offset_reset="earliest", consumer_timeout_ms=10000, **sasl_settings)
    got = sorted(m.value for m in consumer)
    consumer.close()
    assert got == sorted(f"v{i}".encode() for i in range(50))


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_a_wrong_password_is_refused_and_the_broker_serves_on(secure_broker, ca, listener):
    errors: list[KafkaError] = []
    bad = Producer({**client_settings(secure_broker, ca, listener, password="wrong"),
                    "error_cb": errors.append, "reconnect.backoff.ms": 1000})
    deadline = time.monotonic() + 20
    while not errors and time.monotonic() < deadline:
        bad.poll(0.2)
    del bad
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION
    assert "Invalid username or password" in errors[0].str()
    good = AdminClient(client_settings(secure_broker, ca, listener))
    assert good.list_topics(timeout=10).brokers


def test_requests_before_the_login_close_the_connection(secure_broker):
    raw = RawClient("127.0.0.1", secure_broker.ports["SASL_PLAINTEXT"])
    try:
        # ApiVersions is allowed before a login (clients ask it first) ...
        assert raw.call(API_VERSIONS, 0, {}).error_code == ErrorCode.NONE
        # ... Metadata is not: Kafka closes the connection.
        raw.send(METADATA, 1, {"topics": None})
        assert raw.is_closed_by_peer()
    finally:
        raw.close()


def test_sasl_authenticate_reports_the_failure_then_closes(secure_broker):
    raw = RawClient("127.0.0.1", secure_broker.ports["SASL_PLAINTEXT"])
    try:
        handshake = raw.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        assert handshake.error_code == ErrorCode.NONE
        assert set(handshake.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
        answer = raw.call(SASL_AUTHENTICATE, 1, {"auth_bytes": b"\0alice\0nope"})
        assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert "Invalid username or password" in answer.error_message
        assert raw.is_closed_by_peer()
    finally:
        raw.close()


def test_an_unknown_mechanism_is_refused_with_the_enabled_ones(secure_broker):
    raw = RawClient("127.0.0.1", secure_broker.ports["SASL_PLAINTEXT"])
    try:
        handshake = raw.call(SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
        assert handshake.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert "PLAIN" in handshake.mechanisms
    finally:
        raw.close()


def test_a_v0_handshake_carries_the_tokens_as_bare_frames(secure_broker):
    raw = RawClient("127.0.0.1", secure_broker.ports["SASL_PLAINTEXT"])
    try:
        assert raw.call(SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}).error_code == ErrorCode.NONE
        token = b"\0alice\0alice-secret"
        raw.sock.sendall(struct.pack(">i", len(token)) + token)
        assert raw.recv_frame() == b""  # PLAIN's empty server token
        metadata = raw.call(METADATA, 1, {"topics": None})
        assert metadata.brokers[0].port == secure_broker.ports["SASL_PLAINTEXT"]
    finally:
        raw.close()


def test_hostile_sasl_tokens_fail_cleanly(secure_broker):
    for mechanism, token in [("PLAIN", b"\xff\xfe\0\0"), ("PLAIN", b"x" * 100_000), ("SCRAM-SHA-256", b"\x00garbage"),
                             ("SCRAM-SHA-512", b"n,,n=,r="), ("SCRAM-SHA-256", b"p=tls-unique,,n=a,r=b")]:
        raw = RawClient("127.0.0.1", secure_broker.ports["SASL_PLAINTEXT"])
        try:
            assert raw.call(SASL_HANDSHAKE, 1, {"mechanism": mechanism}).error_code == ErrorCode.NONE
            answer = raw.call(SASL_AUTHENTICATE, 2, {"auth_bytes": token})
            assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED, (mechanism, token[:20])
        finally:
            raw.close()
    assert secure_broker.is_running()


def test_kcat_over_sasl_ssl(secure_broker, ca):
    import subprocess

    common = ["-b", f"127.0.0.1:{secure_broker.ports['SASL_SSL']}", "-t", "kcat-secure",
              "-X", "security.protocol=SASL_SSL", "-X", f"ssl.ca.location={ca.cert_path}",
              "-X", "sasl.mechanisms=PLAIN", "-X", "sasl.username=alice", "-X", "sasl.password=alice-secret"]
    lines = "\n".join(f"line-{i}" for i in range(100)) + "\n"
    subprocess.run(["kcat", "-P", *common], input=lines.encode(), check=True, timeout=60)
    out = subprocess.run(["kcat", "-C", "-e", "-o", "beginning", *common], capture_output=True, check=True,
                         timeout=60).stdout.decode()
    assert sorted(out.split()) == sorted(f"line-{i}" for i in range(100))


def test_aiokafka_group_over_sasl_ssl(secure_broker, ca):
    import asyncio
    import ssl

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def run() -> list[bytes]:
        context = ssl.create_default_context(cafile=str(ca.cert_path))
        settings = {"bootstrap_servers": f"127.0.0.1:{secure_broker.ports['SASL_SSL']}",
                    "security_protocol": "SASL_SSL", "ssl_context": context, "sasl_mechanism": "PLAIN",
                    "sasl_plain_username": "alice", "sasl_plain_password": "alice-secret"}
        producer = AIOKafkaProducer(**settings)
        await producer.start()
        try:
            for i in range(60):
                await producer.send("aio-secure", f"a{i}".encode())
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer("aio-secure", group_id="aio-group", auto_offset_reset="earliest", **settings)
        await consumer.start()
        got: list[bytes] = []

        async def read() -> None:
            async for message in consumer:
                got.append(message.value)
                if len(got) == 60:
                    return

        try:
            await asyncio.wait_for(read(), 30)
            await consumer.commit()
        finally:
            await consumer.stop()
        return got

    assert sorted(asyncio.run(run())) == sorted(f"a{i}".encode() for i in range(60))
