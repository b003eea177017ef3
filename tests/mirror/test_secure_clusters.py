"""The mirror between clusters that ask for TLS and SASL, configured with librdkafka's
keys as its copying clients take them: the source over SASL_SSL (PLAIN), the target over
TLS with a client certificate it requires. Topic sync, checkpoints and the failover of a
group go through pykfk's admin client with the same settings; a wrong password stops
the process with the broker's answer; a PKCS#12 key store and PEM text work too, and a
key store that cannot be read is refused before anything starts."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from pykfk.client.admin import AdminClient, ClientSecurity
from pykfk.mirror.config import load_config
from pykfk.mirror.topics import describe_topic_configs
from pykfk.testing import BrokerProcess, wait_until
from tests.mirror.helpers import (
    ROOT,
    MirrorProcess,
    PacedWriter,
    create_topic,
    end_offsets,
    mirror_command,
    total_records,
    write_config,
)
from tests.security.certs import CertificateAuthority

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-secret" user_alice="alice-secret";')
RECORDS = 2000


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: Any) -> Iterator[dict[str, Any]]:
    """A source broker with PLAINTEXT and SASL_SSL listeners, a target broker with
    PLAINTEXT and SSL listeners (client certificates required), and the mirror's files."""
    ca = CertificateAuthority(tmp_path_factory.mktemp("ca"))
    server = ca.issue("server", "localhost", server=True)
    mirror_cert = ca.issue("mirror", "mirror")
    common = {"ssl.keystore.location": str(server.both), "ssl.truststore.location": str(ca.cert_path),
              "group.initial.rebalance.delay.ms": 0}
    source = BrokerProcess(str(tmp_path_factory.mktemp("src") / "data"), {
        **common, "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN", "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
    }, log_level="WARNING").start()
    target = BrokerProcess(str(tmp_path_factory.mktemp("dst") / "data"), {
        **common, "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", "ssl.client.auth": "required",
    }, log_level="WARNING").start()
    try:
        yield {"ca": ca, "cert": mirror_cert, "source": source, "target": target}
    finally:
        source.stop()
        target.stop()


def _plain(broker: BrokerProcess) -> str:
    return f"127.0.0.1:{broker.ports['PLAINTEXT']}"


def _config(path: Path, clusters: dict[str, Any], password: str = "alice-secret", **settings: Any) -> Path:
    ca, cert = clusters["ca"], clusters["cert"]
    return write_config(
        path, ("east", f"127.0.0.1:{clusters['source'].ports['SASL_SSL']}"),
        ("west", f"127.0.0.1:{clusters['target'].ports['SSL']}"),
        **{"source.security.protocol": "SASL_SSL", "source.sasl.mechanisms": "PLAIN",
           "source.sasl.username": "alice", "source.sasl.password": password,
           "source.ssl.ca.location": str(ca.cert_path),
           "target.security.protocol": "SSL", "target.ssl.ca.location": str(ca.cert_path),
           "target.ssl.certificate.location": str(cert.cert), "target.ssl.key.location": str(cert.key)},
        **settings)


@pytest.mark.timeout(180)
def test_topics_checkpoints_and_failover_over_sasl_ssl_and_tls(clusters: dict[str, Any], tmp_path: Path) -> None:
    source, target = _plain(clusters["source"]), _plain(clusters["target"])
    create_topic(source, "orders", 2, retention_ms=7200000)
    PacedWriter(source, "orders", RECORDS, 2).run()
    group = "billing"
    committed = {0: 300, 1: 700}
    consumer = Consumer({"bootstrap.servers": source, "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition("orders", p, o) for p, o in committed.items()], asynchronous=False)
    consumer.close()

    config = _config(tmp_path / "east-west.yaml", clusters, topics="orders", offset_lag_max=50)
    # The admin client the mirror makes of these settings speaks TLS with the certificate.
    security = ClientSecurity.from_librdkafka(load_config(str(config)).target.client("admin"))
    assert (security.protocol, security.ssl_certfile) == ("SSL", str(clusters["cert"].cert))
    mirror = MirrorProcess(config).start()
    try:
        wait_until(lambda: total_records(target, "east.orders", 2) == RECORDS, 60, "every record in the target")
        with AdminClient(target) as admin:
            # Created by the topic sync with the source's own setting, read over SASL_SSL.
            assert describe_topic_configs(admin, "east.orders")["retention.ms"] == "7200000"
            assert {t.name for t in admin.describe_topics(["east.checkpoints.internal"])}

        def failed_over() -> dict[int, int] | None:
            done = subprocess.run(mirror_command("failover", str(config), "--group", group, "--execute",
                                                 "-o", "json"),
                                  check=False, capture_output=True, text=True, timeout=60, cwd=ROOT)
            if done.returncode != 0:
                return None
            rows = json.loads(done.stdout)
            return {row["partition"]: row["downstream_offset"] for row in rows} if len(rows) == 2 else None

        applied = wait_until(failed_over, 60, "checkpoints of both partitions, committed in the target")
        # Same partition counts and a full copy: the translated offsets are at most
        # offset.lag.max before the source's, never after.
        for partition, offset in committed.items():
            assert offset - 50 <= applied[partition] <= offset, (partition, applied)
        reader = Consumer({"bootstrap.servers": target, "group.id": group})
        positions = reader.committed([TopicPartition("east.orders", p) for p in committed], timeout=10)
        reader.close()
        assert {tp.partition: tp.offset for tp in positions} == applied
        assert sum(end_offsets(source, "orders", 2)) == RECORDS
    finally:
        assert mirror.stop() == 0, mirror.tail()
    assert "Traceback" not in mirror.tail(400), mirror.tail()


def test_a_wrong_password_stops_the_mirror_with_the_brokers_answer(clusters: dict[str, Any],
                                                                     tmp_path: Path) -> None:
    config = _config(tmp_path / "bad.yaml", clusters, password="wrong", topics="orders")
    done = subprocess.run(mirror_command("run", str(config), "--max-seconds", "30"), check=False,
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "SASL_AUTHENTICATION_FAILED" in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]


def _pkcs12(cert: Any, path: Path, password: str) -> Path:
    """The mirror's certificate and key as a PKCS#12 key store, as Java tools keep them."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import (
        BestAvailableEncryption,
        load_pem_private_key,
        pkcs12,
    )

    key = load_pem_private_key(Path(cert.key).read_bytes(), None)
    certificate = x509.load_pem_x509_certificate(Path(cert.cert).read_bytes())
    path.write_bytes(pkcs12.serialize_key_and_certificates(b"mirror", key, certificate, None,  # type: ignore[arg-type]
                                                           BestAvailableEncryption(password.encode())))
    return path


def test_a_pkcs12_key_store_and_pem_text_reach_the_admin_client(clusters: dict[str, Any], tmp_path: Path) -> None:
    """librdkafka's ssl.keystore.location (PKCS#12) and ssl.ca.pem work for the topic sync
    as for the copying clients: the private key is never written where others can read it."""
    source, target = _plain(clusters["source"]), _plain(clusters["target"])
    create_topic(source, "payments", 1)
    PacedWriter(source, "payments", 200, 1).run()
    store = _pkcs12(clusters["cert"], tmp_path / "mirror.p12", "store-secret")
    ca, sasl_port = clusters["ca"], clusters["source"].ports["SASL_SSL"]
    config = write_config(
        tmp_path / "p12.yaml", ("east", f"127.0.0.1:{sasl_port}"), ("west", f"127.0.0.1:{clusters['target'].ports['SSL']}"),
        topics="payments",
        **{"source.security.protocol": "SASL_SSL", "source.sasl.mechanisms": "PLAIN",
           "source.sasl.username": "alice", "source.sasl.password": "alice-secret",
           "source.ssl.ca.location": str(ca.cert_path),
           "target.security.protocol": "SSL", "target.ssl.ca.pem": Path(ca.cert_path).read_text(),
           "target.ssl.keystore.location": str(store), "target.ssl.keystore.password": "store-secret"})
    security = ClientSecurity.from_librdkafka(load_config(str(config)).target.client("admin"))
    assert security.ssl_certfile is None and security.ssl_cert_pem and security.ssl_ca_pem
    with AdminClient(f"127.0.0.1:{clusters['target'].ports['SSL']}", security=security) as admin:
        admin.describe_topics()  # the target requires a client certificate: the key store's
    mirror = MirrorProcess(config, "p12").start()
    try:
        wait_until(lambda: total_records(target, "east.payments", 1) == 200, 60, "every record in the target")
    finally:
        assert mirror.stop() == 0, mirror.tail()
    assert "Traceback" not in mirror.tail(400), mirror.tail()

    wrong = _config(tmp_path / "wrong.yaml", clusters, topics="payments",
                    **{"target.ssl.keystore.location": str(store), "target.ssl.keystore.password": "nope"})
    done = subprocess.run(mirror_command("run", str(wrong), "--max-seconds", "5"), check=False,
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "target.ssl.keystore.location" in done.stderr and "PKCS#12" in done.stderr, done.stderr
