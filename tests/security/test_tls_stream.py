"""The TLS stream of a connection, record by record: garbage in place of a handshake, a
record cut off by the end of the stream, a record altered on the way, close_notify and a
half-close after a request, and large requests and answers through real clients. Each bad
stream closes its own connection; the broker serves everyone else meanwhile."""

from __future__ import annotations

import os
import socket
import ssl
import struct

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pykfk.protocol import framing
from tests.security.conftest import client_settings, closed_by_peer_within

API_VERSIONS = 18


class TlsClient:
    """A TLS client over a plain socket (ssl.SSLObject): the test sees every record."""

    def __init__(self, port: int, cafile: str):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        context = ssl.create_default_context(cafile=cafile)
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_hostname="localhost")
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._flush()
                data = self.sock.recv(65536)
                assert data, "closed during the handshake"
                self.incoming.write(data)
        self._flush()

    def _flush(self) -> None:
        if self.outgoing.pending:
            self.sock.sendall(self.outgoing.read())

    def records(self, plaintext: bytes) -> bytes:
        """The TLS records carrying ``plaintext``, not sent."""
        self.tls.write(plaintext)
        return self.outgoing.read()

    def read_until_closed(self, timeout: float = 10.0) -> bytes:
        """All plaintext the broker sends until it ends the stream (close_notify, an
        alert, EOF or reset)."""
        self.sock.settimeout(timeout)
        got = bytearray()
        while True:
            try:
                while True:
                    data = self.tls.read(1 << 16)
                    if not data:  # close_notify
                        return bytes(got)
                    got += data
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLError:  # close_notify, end of stream or an alert
                return bytes(got)
            try:
                data = self.sock.recv(1 << 16)
            except ConnectionResetError:
                return bytes(got)
            if not data:
                self.incoming.write_eof()
            else:
                self.incoming.write(data)

    def close(self) -> None:
        self.sock.close()


def _api_versions_request(correlation_id: int) -> bytes:
    return framing.encode_request(API_VERSIONS, 0, correlation_id, "tls-test", {})


def _answers(stream: bytes) -> list[int]:
    """The correlation ids of the ApiVersions answers in ``stream`` (whole frames only)."""
    ids, pos = [], 0
    while len(stream) - pos >= 4:
        size = struct.unpack_from(">i", stream, pos)[0]
        frame = stream[pos + 4 : pos + 4 + size]
        if len(frame) < size:
            break
        correlation_id, response = framing.decode_response(API_VERSIONS, 0, frame)
        assert response.error_code == 0  # type: ignore[attr-defined]
        ids.append(correlation_id)
        pos += 4 + size
    return ids


def _still_serving(broker, ca) -> None:
    assert AdminClient(client_settings(broker, ca, "SSL")).list_topics(timeout=10).brokers


def test_garbage_in_place_of_a_handshake_closes_that_connection(secure_broker, ca):
    for listener in ("SSL", "SASL_SSL"):
        port = secure_broker.ports[listener]
        # A handshake record header with nonsense after it; then bytes that are no record.
        for garbage in (b"\x16\x03\x01\x00\x40" + os.urandom(64), os.urandom(4096), b"\x16\x03\x03\xff\xff" + b"\0" * 70000):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            try:
                sock.sendall(garbage)
            except (ConnectionResetError, BrokenPipeError):
                pass  # closed before it all went
            assert closed_by_peer_within(sock, 10.0), f"{listener}: {garbage[:8]!r}... left the connection open"
            sock.close()
    _still_serving(secure_broker, ca)


def test_a_record_cut_off_by_the_end_of_the_stream_is_dropped_and_the_rest_answered(secure_broker, ca):
    client = TlsClient(secure_broker.ports["SSL"], str(ca.cert_path))
    try:
        whole = client.records(_api_versions_request(1) + _api_versions_request(2))
        cut = client.records(_api_versions_request(3))
        client.sock.sendall(whole + cut[: len(cut) // 2])
        client.sock.shutdown(socket.SHUT_WR)  # no close_notify: the stream just ends
        assert _answers(client.read_until_closed()) == [1, 2]
    finally:
        client.close()
    _still_serving(secure_broker, ca)


def test_an_altered_record_closes_the_connection_unanswered(secure_broker, ca):
    client = TlsClient(secure_broker.ports["SSL"], str(ca.cert_path))
    try:
        good = client.records(_api_versions_request(1))
        client.sock.sendall(good)
        bad = bytearray(client.records(_api_versions_request(2)))
        bad[len(bad) // 2] ^= 0x55  # inside the encrypted body: its tag no longer matches
        client.sock.sendall(bytes(bad) + client.records(_api_versions_request(3)))
        # The bad record ends the connection at once, the answer to the request before
        # it going out only if it was sent before the bad record was read.
        assert _answers(client.read_until_closed()) in ([], [1])
    finally:
        client.close()
    _still_serving(secure_broker, ca)


def test_close_notify_after_requests_gets_them_answered(secure_broker, ca):
    client = TlsClient(secure_broker.ports["SSL"], str(ca.cert_path))
    try:
        stream = b"".join(client.records(_api_versions_request(i)) for i in range(1, 6))
        try:
            client.tls.unwrap()
        except ssl.SSLWantReadError:
            pass  # the broker's close_notify comes later
        client.sock.sendall(stream + client.outgoing.read())
        assert _answers(client.read_until_closed()) == [1, 2, 3, 4, 5]
    finally:
        client.close()


def test_large_requests_and_answers_through_tls(secure_broker, ca):
    """Requests of many TLS records and answers larger than a socket buffer, on both TLS
    listeners, with the reads of a slow consumer paused and resumed."""
    value = os.urandom(64 * 1024)
    for listener, sasl in (("SSL", {}), ("SASL_SSL", {"sasl.mechanism": "PLAIN", "sasl.username": "alice",
                                                      "sasl.password": "alice-secret"})):
        settings = client_settings(secure_broker, ca, listener, **sasl)
        topic = f"tls-stream-{listener.lower()}"
        admin = AdminClient(client_settings(secure_broker, ca, "SSL"))
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(20)
        producer = Producer({**settings, "linger.ms": 20, "batch.size": 1_000_000, "message.max.bytes": 2_000_000})
        for i in range(200):
            producer.produce(topic, value[i:] + value[:i], key=str(i).encode())
        assert producer.flush(60) == 0
        consumer = Consumer({**settings, "group.id": f"g-{topic}", "enable.auto.commit": False,
                             "fetch.max.bytes": 8_000_000, "max.partition.fetch.bytes": 8_000_000})
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got: dict[int, bytes] = {}
        try:
            for _ in range(200):
                for message in consumer.consume(100, 1.0):
                    assert message.error() is None, message.error()
                    got[int(message.key())] = message.value()
                if len(got) == 200:
                    break
        finally:
            consumer.close()
        assert len(got) == 200
        assert all(got[i] == value[i:] + value[:i] for i in range(200))
