"""Capture the record batches librdkafka (confluent-kafka) writes, as golden test files.

A tiny single-broker Kafka stand-in on 127.0.0.1 answers just enough of ApiVersions,
Metadata and Produce for a confluent_kafka.Producer to send, and stores the `records`
field of every Produce request: the exact bytes librdkafka built. One file per codec:

    tests/core/golden/librdkafka_<codec>.hex

(and librdkafka_legacy_<codec>.hex for the magic 1 message sets it writes to a broker that
only offers Produce 0-2) holds '#' comment lines (librdkafka version, codec, recipe) and one hex line per captured
records field. The messages follow golden_messages() below; tests/core/test_records_clients.py
rebuilds the same list and checks every decoded record against it.

Regenerate (needs confluent-kafka; takes a few seconds):

    python tools/capture_librdkafka_batches.py [--out tests/core/golden]

Wire facts used (apache/kafka message JSON specs): request header v1 = api_key int16,
api_version int16, correlation_id int32, client_id int16-length string; response header v0
= correlation_id. ApiVersions is answered in the v0 layout (an unsupported version gets
error 35 and the same list, KIP-511), and librdkafka falls back to v0.
"""

from __future__ import annotations

import argparse
import asyncio
import struct
import threading
from pathlib import Path

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")

# (api_key, min_version, max_version) advertised. librdkafka enables zstd only when Produce 7
# and Fetch 10 are in range; Fetch and FindCoordinator are advertised but never asked for.
API_RANGES = ((0, 3, 7), (1, 4, 11), (3, 1, 5), (10, 0, 1), (18, 0, 3))
# Produce 0-2 / Fetch 0-3 (pre-0.11 broker): librdkafka then writes magic 1 message sets.
LEGACY_API_RANGES = ((0, 0, 2), (1, 0, 3), (3, 1, 5), (10, 0, 1), (18, 0, 3))
LEGACY_CODECS = ("none", "gzip", "snappy", "lz4")


def golden_messages(legacy: bool = False) -> list[tuple[bytes | None, bytes | None, int, list[tuple[str, bytes]]]]:
    """The messages every capture produces (compressible values, so every codec shrinks
    them); without headers for legacy message sets, which cannot carry any."""
    out: list[tuple[bytes | None, bytes | None, int, list[tuple[str, bytes]]]] = []
    for i in range(12):
        key = None if i == 3 else b"key-%d" % i
        value = None if i == 5 else (b"value-%d " % i) * (i * 7 + 1)
        headers = [] if legacy else [(f"h{j}", b"hv-%d-%d" % (i, j)) for j in range(i % 3)]
        out.append((key, value, 1_700_000_000_000 + i * 1000, headers))
    return out


def _string(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


class _Reader:
    def __init__(self, data: bytes, pos: int = 0):
        self.data, self.pos = data, pos

    def take(self, fmt: str):
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def string(self) -> str | None:
        n = self.take(">h")
        if n < 0:
            return None
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def bytes_(self) -> bytes | None:
        n = self.take(">i")
        if n < 0:
            return None
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b


class CaptureBroker:
    """Answers one producer's requests; `captured` collects Produce records fields."""

    def __init__(self, api_ranges: tuple[tuple[int, int, int], ...] = API_RANGES) -> None:
        self.api_ranges = api_ranges
        self.captured: list[bytes] = []
        self.port = 0
        self.next_offset = 0

    def handle(self, frame: bytes) -> bytes | None:
        api_key, version, correlation_id = struct.unpack_from(">hhi", frame)
        r = _Reader(frame, 8)
        r.string()  # client_id
        if api_key == 18:
            body = struct.pack(">hi", 35 if version > 0 else 0, len(self.api_ranges))
            body += b"".join(struct.pack(">hhh", *a) for a in self.api_ranges)
        elif api_key == 3:
            body = self._metadata(r, version)
        elif api_key == 0:
            body = self._produce(r, version)
            if body is None:
                return None
        else:
            raise RuntimeError(f"unexpected request api_key={api_key} v{version}")
        return struct.pack(">ii", len(body) + 4, correlation_id) + body

    def _metadata(self, r: _Reader, version: int) -> bytes:
        count = r.take(">i")
        topics = [r.string() for _ in range(max(count, 0))]
        body = struct.pack(">i", 0) if version >= 3 else b""           # throttle_time_ms
        body += struct.pack(">i", 1) + struct.pack(">i", 0) + _string("127.0.0.1")
        body += struct.pack(">i", self.port) + _string(None)           # rack
        if version >= 2:
            body += _string("capture-cluster")
        body += struct.pack(">i", 0)                                   # controller_id
        body += struct.pack(">i", len(topics))
        for name in topics:
            body += struct.pack(">h", 0) + _string(name) + b"\x00"     # error, name, internal
            body += struct.pack(">i", 1) + struct.pack(">hii", 0, 0, 0)
            body += struct.pack(">ii", 1, 0) + struct.pack(">ii", 1, 0)  # replicas, isr
            if version >= 5:
                body += struct.pack(">i", 0)                           # offline_replicas
        return body

    def _produce(self, r: _Reader, version: int) -> bytes | None:
        if version >= 3:
            r.string()  # transactional_id
        acks = r.take(">h")
        r.take(">i")  # timeout_ms
        responses = b""
        topics = r.take(">i")
        for _ in range(topics):
            name = r.string()
            partitions = r.take(">i")
            responses += _string(name) + struct.pack(">i", partitions)
            for _ in range(partitions):
                index = r.take(">i")
                records = r.bytes_() or b""
                self.captured.append(records)
                responses += struct.pack(">ihq", index, 0, self.next_offset)
                if version >= 2:
                    responses += struct.pack(">q", -1)                 # log_append_time_ms
                if version >= 5:
                    responses += struct.pack(">q", 0)                  # log_start_offset
                self.next_offset += 1000
        if acks == 0:
            return None
        throttle = struct.pack(">i", 0) if version >= 1 else b""
        return struct.pack(">i", topics) + responses + throttle


async def _serve(broker: CaptureBroker, ready: threading.Event, stop: asyncio.Event) -> None:
    clients: set[asyncio.Task] = set()

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        clients.add(asyncio.current_task())
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                reply = broker.handle(await reader.readexactly(size))
                if reply is not None:
                    writer.write(reply)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(on_client, "127.0.0.1", 0)
    broker.port = server.sockets[0].getsockname()[1]
    ready.set()
    async with server:
        await stop.wait()
        for task in clients:
            task.cancel()
        await asyncio.gather(*clients, return_exceptions=True)


def capture(codec: str, legacy: bool = False) -> tuple[list[bytes], str]:
    """Runs a Producer with compression.type=codec against the stand-in (a pre-0.11 one
    when legacy); returns the captured records fields and librdkafka's version string."""
    import confluent_kafka

    broker = CaptureBroker(LEGACY_API_RANGES if legacy else API_RANGES)
    ready = threading.Event()
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    thread = threading.Thread(target=loop.run_until_complete, args=(_serve(broker, ready, stop),),
                              daemon=True)
    thread.start()
    if not ready.wait(10):
        raise RuntimeError("capture broker did not start")
    try:
        producer = confluent_kafka.Producer({
            "bootstrap.servers": f"127.0.0.1:{broker.port}",
            "compression.type": codec,
            "linger.ms": 100,
            "enable.idempotence": False,
            "acks": 1,
            "message.timeout.ms": 10000,
        })
        for key, value, ts, headers in golden_messages(legacy):
            producer.produce("golden", value=value, key=key, partition=0, timestamp=ts,
                             headers=headers or None)
        left = producer.flush(15)
        del producer  # closes librdkafka's connections before the stand-in stops
        if left:
            raise RuntimeError(f"{left} messages not delivered")
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()
    return broker.captured, confluent_kafka.libversion()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "tests/core/golden"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = [(c, False) for c in CODECS] + [(c, True) for c in LEGACY_CODECS]
    for codec, legacy in runs:
        payloads, version = capture(codec, legacy)
        kind = "magic 1 message sets (broker offering Produce 0-2)" if legacy else "magic 2 batches"
        lines = [f"# Produce records captured from librdkafka {version}, compression.type={codec}, {kind}",
                 f"# messages: tools/capture_librdkafka_batches.py golden_messages({legacy}); regenerate with",
                 "#   python tools/capture_librdkafka_batches.py",
                 *(p.hex() for p in payloads)]
        path = out / f"librdkafka_{'legacy_' if legacy else ''}{codec}.hex"
        path.write_text("\n".join(lines) + "\n")
        print(f"{path}: {len(payloads)} records field(s), {sum(map(len, payloads))} bytes")


if __name__ == "__main__":
    main()
