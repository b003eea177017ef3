"""The compiled request lane behind TLS and SASL listeners: confluent-kafka produces and
consumes through SSL, SASL_PLAINTEXT and SASL_SSL, and the reads of those connections go
through the lane (``KafkaServer.lane``), the SASL login through the dispatcher's path."""

from __future__ import annotations

import time

import pytest

from pykfk.testing import InProcessBroker
from tests.security.certs import CertificateAuthority

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-secret" user_alice="alice-secret";')
LISTENERS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


class _CountingLane:
    """The server's lane, counting the reads handed to it."""

    def __init__(self, lane):  # type: ignore[no-untyped-def]
        self.lane = lane
        self.reads = 0

    def read(self, conn):  # type: ignore[no-untyped-def]
        self.reads += 1
        self.lane.read(conn)

    def __getattr__(self, name):  # type: ignore[no-untyped-def]
        return getattr(self.lane, name)


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    ca = CertificateAuthority(tmp_path_factory.mktemp("lane-ca"))
    server = ca.issue("server", "localhost", server=True)
    broker = InProcessBroker(str(tmp_path_factory.mktemp("lane-secure") / "data"), {
        "listeners": ",".join(f"{name}://127.0.0.1:0" for name in LISTENERS),
        "ssl.keystore.location": str(server.both),
        "ssl.truststore.location": str(ca.cert_path),
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "num.partitions": 2,
    }).start()
    lanes = {}

    async def wrap() -> None:
        for name, server_ in zip(LISTENERS, broker.broker.servers, strict=True):
            server_.lane = lanes[name] = _CountingLane(server_.lane)

    broker.call(wrap)
    yield broker, ca, lanes
    broker.stop()
    assert not broker.loop_errors


def _settings(broker, ca, listener: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    _host, port = broker.broker.bound[listener]
    settings = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": listener}
    if "SSL" in listener:
        settings["ssl.ca.location"] = str(ca.cert_path)
    if "SASL" in listener:
        settings.update({"sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret"})
    return settings


@pytest.mark.parametrize("listener", ["SSL", "SASL_PLAINTEXT", "SASL_SSL"])
def test_produce_and_fetch_through_the_lane(secure, listener):
    from confluent_kafka import Consumer, Producer

    broker, ca, lanes = secure
    settings = _settings(broker, ca, listener)
    topic = f"lane-{listener.lower()}"
    before = lanes[listener].reads
    producer = Producer({**settings, "acks": "all", "linger.ms": 0})
    values = [b"%s-%d" % (listener.encode(), i) for i in range(300)]
    for value in values:
        producer.produce(topic, value)
        producer.poll(0)
    assert producer.flush(30) == 0
    consumer = Consumer({**settings, "group.id": f"g-{listener}", "auto.offset.reset": "earliest",
                         "fetch.wait.max.ms": 50})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < len(values) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append(message.value())
    consumer.close()
    assert sorted(got) == sorted(values)
    assert lanes[listener].reads - before > 10
