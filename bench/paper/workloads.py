"""One producer or consumer run with a Python client, in a process of its own.

    python -m bench.paper.workloads '<json spec>'

The parent (``bench.paper.__main__``) reads this process's stdout: ``start`` when the
clock starts (after connecting and fetching metadata), ``progress <count>`` every
~100 ms, and ``result {json}`` at the end. Running each client in its own process keeps
the clients' CPU apart from the harness and from each other.

Spec keys: client, role (produce | consume), bootstrap (host:port, or "" for the mock
cluster), topic, n, size, batch ("1" | "50" | "default"), max_seconds, fetch_bytes, acks.

What the batch settings mean per client (the paper: a batch of 1 and of 50 messages):
- confluent-kafka: ``batch.num.messages`` 1 / 50 with ``linger.ms`` 0 / 100 (a batch is
  sent full unless the producer outruns the broker); default = librdkafka's own.
- kafka-python and pykfk's Producer: ``batch_size`` 0 (one record a batch) / bytes of 50
  records with ``linger_ms`` 100; default = the client's own.
The records per batch that really reached the disk are counted by the parent from the
log, so the table shows what each setting did rather than what was asked.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

PROGRESS_INTERVAL = 0.1
# A magic-2 batch header (61 bytes) plus ~10 bytes of per-record framing for a 200-byte
# value: used to size "50 records" for clients whose batch size is in bytes.
BATCH_HEADER = 61
RECORD_FRAMING = 12
# ActiveMQ's STOMP subscriptions in client-ack mode stop dispatching after a window of
# unacknowledged messages smaller than the requested prefetch: ack well inside it.
STOMP_ACK_EVERY = 100
# Producers whose send() returns a future: one future in SAMPLE_EVERY is watched, and at
# most BACKLOG messages may be sent and not yet delivered (librdkafka's own default queue
# limit, queue.buffering.max.messages, is 100000). At batch 1 each request carries one
# record and a handful are in flight, so a small backlog already keeps the pipe full.
SAMPLE_EVERY = 1024
MOCK_FILL_BATCH = 1000
# What the mock cluster keeps of a partition: it drops the oldest messages past ~5 MB.
MOCK_STORED = 20_000
FETCH_WAIT_MS = 5
FETCH_QUEUE_BACKOFF_MS = 10
BACKLOG = 100_000
BACKLOG_BATCH_1 = 10_000


def thread_cpu_seconds() -> dict[int, tuple[str, float]]:
    """tid -> (thread name, user + system CPU seconds) for every thread of this process,
    from /proc (librdkafka's own threads included: they are named rdk:main,
    rdk:broker0, ...)."""
    ticks = os.sysconf("SC_CLK_TCK")
    threads: dict[int, tuple[str, float]] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:  # the thread ended in between
            continue
        # "tid (comm) state ..." where comm may hold spaces or parentheses
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        if int(tid) == os.getpid():
            name += " (main)"  # the thread calling the client's API
        fields = stat[stat.rindex(")") + 2:].split()
        threads[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / ticks)
    return threads


def busiest_threads(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]],
                    seconds: float, top: int = 3) -> list[list[Any]]:
    """[name, share of one core] of the threads that used the most CPU between two
    snapshots: a thread near 1.0 is what bounds the run."""
    used = [(name, cpu - before.get(tid, (name, 0.0))[1]) for tid, (name, cpu) in after.items()]
    used.sort(key=lambda item: -item[1])
    return [[name, round(cpu / seconds, 3)] for name, cpu in used[:top] if seconds > 0]


class Reporter:
    """Writes the progress protocol to stdout."""

    def __init__(self) -> None:
        self.next_at = 0.0
        self.started = 0.0
        self.seconds: float | None = None
        self.threads_start: dict[int, tuple[str, float]] = {}
        self.threads_end: dict[int, tuple[str, float]] = {}

    def start(self) -> float:
        self.threads_start = thread_cpu_seconds()
        self.started = time.perf_counter()
        self.next_at = self.started + PROGRESS_INTERVAL
        print("start", flush=True)
        return self.started

    def stop(self) -> float:
        """Ends the timed section (before the client is closed, which ends its threads):
        its seconds, also kept for ``result``."""
        self.seconds = time.perf_counter() - self.started
        self.threads_end = thread_cpu_seconds()
        return self.seconds

    def maybe(self, count: int, now: float) -> None:
        if now >= self.next_at:
            print(f"progress {count}", flush=True)
            self.next_at = now + PROGRESS_INTERVAL

    def result(self, count: int, seconds: float, **extra: Any) -> None:
        if self.seconds is None:
            self.stop()
        threads = busiest_threads(self.threads_start, self.threads_end, seconds)
        print(f"progress {count}", flush=True)
        print("result " + json.dumps({"count": count, "seconds": seconds, "threads": threads,
                                      **extra}), flush=True)


def _payload(size: int) -> bytes:
    # Random bytes: nothing to gain from compression (none is configured anyway).
    return os.urandom(size)


def _batch_bytes(size: int, records: int) -> int:
    return BATCH_HEADER + records * (size + RECORD_FRAMING)


# ---------------------------------------------------------------- confluent-kafka

def _confluent_producer_conf(spec: dict[str, Any]) -> dict[str, Any]:
    conf: dict[str, Any] = {"acks": str(spec["acks"]), "enable.idempotence": False}
    if spec["bootstrap"]:
        conf["bootstrap.servers"] = spec["bootstrap"]
    else:
        conf["test.mock.num.brokers"] = 1
    if spec["batch"] == "1":
        conf.update({"batch.num.messages": 1, "linger.ms": 0})
    elif spec["batch"] == "50":
        conf.update({"batch.num.messages": 50, "linger.ms": 100})
    return conf


def _confluent_produce(producer: Any, topic: str, n: int, payload: bytes, deadline: float,
                       reporter: Reporter | None) -> int:
    produce = producer.produce
    poll = producer.poll
    sent = 0
    while sent < n:
        try:
            produce(topic, payload, partition=0)
        except BufferError:  # local queue full: let deliveries drain
            poll(0.001)
            continue
        sent += 1
        if not sent & 1023:
            poll(0)
            now = time.perf_counter()
            if reporter is not None:
                reporter.maybe(sent - len(producer), now)
            if now > deadline:
                break
    remaining = producer.flush(300)
    if remaining:
        raise RuntimeError(f"{remaining} messages not delivered")
    return sent


def confluent_produce(spec: dict[str, Any]) -> None:
    from confluent_kafka import Producer

    errors: list[str] = []
    conf = _confluent_producer_conf(spec)
    conf["error_cb"] = lambda err: errors.append(str(err))
    producer = Producer(conf)
    producer.list_topics(spec["topic"], timeout=30)  # connect, create the topic
    reporter = Reporter()
    t0 = reporter.start()
    sent = _confluent_produce(producer, spec["topic"], spec["n"], _payload(spec["size"]),
                              t0 + spec["max_seconds"], reporter)
    reporter.result(sent, reporter.stop(), errors=errors[:5])


def confluent_consume(spec: dict[str, Any]) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    bootstrap = spec["bootstrap"]
    keep_alive = None
    pass_end = None  # mock only: last offset of the stored messages, read over and over
    if not bootstrap:
        # The mock cluster lives inside the client that created it: fill it with a
        # producer (untimed), then point a consumer at the mock broker's address. The
        # mock keeps only ~5 MB a partition (older messages are dropped), so it holds
        # MOCK_STORED messages and the consumer reads them again from the start after
        # each pass until it has N. It answers a Fetch with one stored batch, so the
        # batches hold 1000 records (~200 KB: the paper's pull size).
        conf = _confluent_producer_conf({**spec, "batch": "default"})
        conf.update({"batch.num.messages": MOCK_FILL_BATCH, "linger.ms": 100})
        keep_alive = Producer(conf)
        stored = min(spec["n"], MOCK_STORED)
        _confluent_produce(keep_alive, spec["topic"], stored, _payload(spec["size"]),
                           float("inf"), None)
        pass_end = stored - 1
        broker = next(iter(keep_alive.list_topics(timeout=10).brokers.values()))
        bootstrap = f"{broker.host}:{broker.port}"
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "bench-paper",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        # the paper's consumer pulled ~200 KB per request
        "fetch.message.max.bytes": spec["fetch_bytes"],
        # A fetch at the end of the data waits this long for more (default 500 ms). It
        # never matters while data is waiting, but the mock pass restarts at its end.
        "fetch.wait.max.ms": FETCH_WAIT_MS,
        # When the broker delivers faster than this loop drains, the local queue passes
        # queued.min.messages (100000) and librdkafka stops fetching for this long
        # (default 1000 ms) without waking when the queue empties: whole-second stalls
        # that measured the race, not the broker or the client.
        "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
    })
    consumer.list_topics(spec["topic"], timeout=30)
    start = TopicPartition(spec["topic"], 0, 0)
    # group.id makes librdkafka find the group coordinator (on pykfk's first lookup that
    # creates __consumer_offsets): done before the clock starts, like the connection.
    consumer.committed([start], timeout=30)
    reporter = Reporter()
    t0 = reporter.start()
    consumer.assign([start])
    n, got, errors, deadline = spec["n"], 0, [], t0 + spec["max_seconds"]
    consume = consumer.consume
    while got < n:
        messages = consume(1000, 1.0)
        now = time.perf_counter()
        for m in messages:
            if m.error() is not None:
                errors.append(str(m.error()))
                got -= 1
        got += len(messages)
        if pass_end is not None and messages and messages[-1].offset() == pass_end:
            consumer.seek(start)
        reporter.maybe(got, now)
        if now > deadline or len(errors) > 100:
            break
    seconds = reporter.stop()
    consumer.close()
    note = f"mock: {MOCK_STORED} messages read repeatedly" if pass_end is not None else ""
    reporter.result(min(got, n), seconds, errors=errors[:5], note=note)
    del keep_alive


# ---------------------------------------------------------------- kafka-python


def _python_batching(spec: dict[str, Any]) -> dict[str, int]:
    """batch_size/linger_ms for the Python producers (kafka-python's names, which
    pykfk's Producer shares): none for b1, 50 records for b50, the default otherwise."""
    if spec["batch"] == "1":
        return {"batch_size": 0, "linger_ms": 0}
    if spec["batch"] == "50":
        return {"batch_size": _batch_bytes(spec["size"], 50), "linger_ms": 100}
    return {}


def _timed_sends(producer: Any, spec: dict[str, Any]) -> None:
    """The timed section of a Python producer run: send, flush, report."""
    payload = _payload(spec["size"])
    reporter = Reporter()
    t0 = reporter.start()
    _drive_sends(lambda: producer.send(spec["topic"], payload, partition=0), spec, t0, reporter)
    producer.flush(300)
    seconds = reporter.stop()
    producer.close(10)
    reporter.result(spec["_sent"], seconds)

def kafka_python_produce(spec: dict[str, Any]) -> None:
    from kafka import KafkaProducer

    conf: dict[str, Any] = {"bootstrap_servers": spec["bootstrap"], "acks": int(spec["acks"])}
    conf.update(_python_batching(spec))
    producer = KafkaProducer(**conf)
    producer.partitions_for(spec["topic"])
    _timed_sends(producer, spec)


def kafka_python_consume(spec: dict[str, Any]) -> None:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=spec["bootstrap"], group_id=None, enable_auto_commit=False,
        auto_offset_reset="earliest", max_partition_fetch_bytes=spec["fetch_bytes"],
    )
    consumer.partitions_for_topic(spec["topic"])
    reporter = Reporter()
    t0 = reporter.start()
    consumer.assign([TopicPartition(spec["topic"], 0)])
    consumer.seek_to_beginning()

    def read() -> int:
        batches = consumer.poll(timeout_ms=1000, max_records=1000)
        return sum(len(records) for records in batches.values())

    got, seconds = _timed_reads(read, spec, t0, reporter)
    consumer.close()
    reporter.result(got, seconds)


# ---------------------------------------------------------------- pykfk's clients

def pykfk_produce(spec: dict[str, Any]) -> None:
    from pykfk.producer import Producer

    conf: dict[str, Any] = {"acks": int(spec["acks"]), "enable_idempotence": False}
    conf.update(_python_batching(spec))
    producer = Producer(spec["bootstrap"], **conf)
    producer.partitions_for(spec["topic"])
    _timed_sends(producer, spec)


def pykfk_consume(spec: dict[str, Any]) -> None:
    from pykfk.consumer import SimpleConsumer

    consumer = SimpleConsumer(spec["bootstrap"])
    reporter = Reporter()
    t0 = reporter.start()
    offset = 0

    def read() -> int:
        nonlocal offset
        messages = consumer.fetch(spec["topic"], 0, offset, max_bytes=spec["fetch_bytes"])
        offset = messages.next_offset
        return len(messages)

    got, seconds = _timed_reads(read, spec, t0, reporter)
    consumer.close()
    reporter.result(got, seconds)


def _timed_reads(read: Callable[[], int], spec: dict[str, Any], t0: float,
                 reporter: Reporter) -> tuple[int, float]:
    """The timed section of a Python consumer run: ``read`` (messages it got) until N or
    the deadline; returns (messages, seconds)."""
    n, got, deadline = spec["n"], 0, t0 + spec["max_seconds"]
    while got < n:
        got += read()
        now = time.perf_counter()
        reporter.maybe(got, now)
        if now > deadline:
            break
    return got, reporter.stop()


def _drive_sends(send: Callable[[], Any], spec: dict[str, Any], t0: float, reporter: Reporter) -> None:
    """Send up to N messages (until the deadline).

    When ``send`` returns a future, every SAMPLE_EVERY-th one is kept: progress reports
    what was delivered, and the backlog of sent-but-undelivered messages is held under a
    window, so a run stopped by the deadline does not spend minutes flushing a queue the
    client built far ahead of the broker. Senders without futures (pika, stomp.py: no
    answer per message) report what was sent.
    """
    window = BACKLOG_BATCH_1 if spec["batch"] == "1" else BACKLOG
    n, deadline, sent, delivered = spec["n"], t0 + spec["max_seconds"], 0, 0
    pending: collections.deque[tuple[int, Any]] = collections.deque()
    while sent < n:
        future = send()
        sent += 1
        if sent % SAMPLE_EVERY:
            continue
        if future is None:
            delivered = sent
        else:
            pending.append((sent, future))
            while pending and _is_done(pending[0][1]):
                delivered = pending.popleft()[0]
            while pending and sent - delivered > window:
                index, oldest = pending.popleft()
                _wait(oldest)
                delivered = index
        now = time.perf_counter()
        reporter.maybe(delivered, now)
        if now > deadline:
            break
    spec["_sent"] = sent


# kafka-python's FutureRecordMetadata has is_done / get(); pykfk's are concurrent.futures.
def _is_done(future: Any) -> bool:
    return future.is_done if hasattr(future, "is_done") else future.done()


def _wait(future: Any) -> None:
    if hasattr(future, "is_done"):
        future.get(300)
    else:
        future.result(300)


# ---------------------------------------------------------------- peers' Python clients

def pika_produce(spec: dict[str, Any]) -> None:
    """RabbitMQ with pika: persistent messages, durable queue, no publisher confirms."""
    import pika

    host, port = spec["bootstrap"].split(":")
    conn = pika.BlockingConnection(pika.ConnectionParameters(host, int(port)))
    channel = conn.channel()
    channel.queue_declare(spec["topic"], durable=True)
    props = pika.BasicProperties(delivery_mode=2)
    payload = _payload(spec["size"])
    publish = channel.basic_publish
    reporter = Reporter()
    t0 = reporter.start()
    _drive_sends(lambda: publish("", spec["topic"], payload, props), spec, t0, reporter)
    sent = spec["_sent"]
    # stored = the queue reports every message (a passive declare round trip)
    until = time.monotonic() + 120
    while channel.queue_declare(spec["topic"], passive=True).method.message_count < sent:
        if time.monotonic() > until:
            break
        time.sleep(0.005)
    seconds = reporter.stop()
    conn.close()
    reporter.result(sent, seconds, note="no confirms")


def pika_consume(spec: dict[str, Any]) -> None:
    import pika

    host, port = spec["bootstrap"].split(":")
    conn = pika.BlockingConnection(pika.ConnectionParameters(host, int(port)))
    channel = conn.channel()
    channel.basic_qos(prefetch_count=1000)
    reporter = Reporter()
    t0 = reporter.start()
    n, got, deadline = spec["n"], 0, t0 + spec["max_seconds"]
    for method, _props, _body in channel.consume(spec["topic"], inactivity_timeout=10):
        if method is None:
            break
        got += 1
        if got % 500 == 0 or got == n:
            channel.basic_ack(method.delivery_tag, multiple=True)
        if not got & 255:
            now = time.perf_counter()
            reporter.maybe(got, now)
            if now > deadline:
                break
        if got >= n:
            break
    seconds = reporter.stop()
    channel.cancel()
    conn.close()
    reporter.result(got, seconds, note="prefetch 1000, ack every 500")


def stomp_produce(spec: dict[str, Any]) -> None:
    """ActiveMQ over STOMP with stomp.py: persistent messages, no receipts but the last."""
    import threading

    import stomp

    host, port = spec["bootstrap"].split(":")
    conn = stomp.Connection([(host, int(port))], heartbeats=(0, 0))
    receipt = threading.Event()

    class Listener(stomp.ConnectionListener):
        def on_receipt(self, frame: Any) -> None:
            receipt.set()

    conn.set_listener("bench", Listener())
    conn.connect(wait=True)
    destination = f"/queue/{spec['topic']}"
    payload = _payload(spec["size"])
    headers = {"persistent": "true"}
    reporter = Reporter()
    t0 = reporter.start()
    _drive_sends(lambda: conn.send(destination, payload, headers=headers), spec, t0, reporter)
    # A receipt for one last (not counted) message: the broker answers it after the rest.
    conn.send(destination, payload, headers={**headers, "receipt": "last"})
    receipt.wait(300)
    seconds = reporter.stop()
    conn.disconnect()
    reporter.result(spec["_sent"] + 1, seconds, note="receipt on last message only")


def stomp_consume(spec: dict[str, Any]) -> None:
    import threading

    import stomp

    host, port = spec["bootstrap"].split(":")
    conn = stomp.Connection([(host, int(port))], heartbeats=(0, 0))
    state = {"got": 0}
    done = threading.Event()
    n = spec["n"]

    class Listener(stomp.ConnectionListener):
        def on_message(self, frame: Any) -> None:
            state["got"] += 1
            got = state["got"]
            if got % STOMP_ACK_EVERY == 0 or got == n:
                conn.ack(frame.headers["message-id"], "bench")
            if got >= n:
                done.set()

    conn.set_listener("bench", Listener())
    conn.connect(wait=True)
    reporter = Reporter()
    t0 = reporter.start()
    conn.subscribe(f"/queue/{spec['topic']}", id="bench", ack="client",
                   headers={"activemq.prefetchSize": "1000"})
    deadline = t0 + spec["max_seconds"]
    while not done.wait(PROGRESS_INTERVAL):
        reporter.maybe(state["got"], time.perf_counter())
        if time.perf_counter() > deadline:
            break
    seconds = reporter.stop()
    conn.disconnect()
    reporter.result(state["got"], seconds, note=f"prefetch 1000, cumulative ack every {STOMP_ACK_EVERY}")


WORKLOADS: dict[tuple[str, str], Callable[[dict[str, Any]], None]] = {
    ("confluent", "produce"): confluent_produce,
    ("confluent", "consume"): confluent_consume,
    ("kafka-python", "produce"): kafka_python_produce,
    ("kafka-python", "consume"): kafka_python_consume,
    ("pykfk", "produce"): pykfk_produce,
    ("pykfk", "consume"): pykfk_consume,
    ("pika", "produce"): pika_produce,
    ("pika", "consume"): pika_consume,
    ("stomp", "produce"): stomp_produce,
    ("stomp", "consume"): stomp_consume,
}


def main(argv: list[str]) -> None:
    spec = json.loads(argv[1])
    WORKLOADS[(spec["client"], spec["role"])](spec)


if __name__ == "__main__":
    main(sys.argv)
