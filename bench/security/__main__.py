"""python -m bench.security [--messages 300000] [--size 1024] [--runs 3]

One broker with PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-256) listeners. Per listener, in
turn and repeated ``--runs`` times: confluent-kafka produces ``--messages`` records
(acks=1, linger 5 ms) to a topic of its own, then a consumer reads them back. Reported:
MB/s of each side and the broker's CPU seconds per MB (from /proc over the timed part; in all
and in user space alone, where TLS costs),
medians, with ratios against PLAINTEXT; ``results.json`` and ``security.png`` go to
``--out``."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.scale.probes import user_and_kernel_cpu_seconds
from pykfk.testing import BrokerProcess

LISTENERS = ("PLAINTEXT", "SSL", "SASL_SSL")


def _start_broker(workdir: Path, cipher_suites: str = "") -> tuple[BrokerProcess, str]:
    from tests.security.certs import CertificateAuthority

    ca = CertificateAuthority(workdir)
    server = ca.issue("server", "localhost", server=True)
    broker = BrokerProcess(str(workdir / "data"), {
        "listeners": ",".join(f"{name}://127.0.0.1:0" for name in LISTENERS),
        "ssl.keystore.location": str(server.both),
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        **({"ssl.cipher.suites": cipher_suites} if cipher_suites else {}),
    }, log_level="WARNING").start()
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion("bench", info, b"bench-pw")])["bench"].result(20)
    return broker, str(ca.cert_path)


def _settings(broker: BrokerProcess, ca: str, listener: str) -> dict[str, Any]:
    settings: dict[str, Any] = {"bootstrap.servers": f"127.0.0.1:{broker.ports[listener]}",
                                "security.protocol": listener}
    if "SSL" in listener:
        settings["ssl.ca.location"] = ca
    if "SASL" in listener:
        settings.update({"sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "bench", "sasl.password": "bench-pw"})
    return settings


def _produce(settings: dict[str, Any], topic: str, count: int, value: bytes) -> None:
    from confluent_kafka import Producer

    producer = Producer({**settings, "linger.ms": 5, "acks": 1, "queue.buffering.max.messages": 1_000_000})
    producer.list_topics(topic, timeout=20)  # log in and learn the leader before the clock starts
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("records left undelivered")


def _consume(settings: dict[str, Any], topic: str, count: int) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({**settings, "group.id": f"bench-{topic}", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 5, "fetch.queue.backoff.ms": 10})
    # Assigned, not subscribed: no group join inside the timed part.
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got, deadline = 0, time.monotonic() + 300
    try:
        while got < count and time.monotonic() < deadline:
            got += sum(1 for m in consumer.consume(10_000, 0.5) if m.error() is None)
    finally:
        consumer.close()
    if got < count:
        raise RuntimeError(f"read {got} of {count} records")


def _timed(pid: int, work: Any, mb: float) -> dict[str, float]:
    (user0, kernel0), t0 = user_and_kernel_cpu_seconds(pid), time.monotonic()
    own0 = os.times()
    work()
    seconds = time.monotonic() - t0
    own1 = os.times()
    user1, kernel1 = user_and_kernel_cpu_seconds(pid)
    user, kernel = user1 - user0, kernel1 - kernel0
    # The client (librdkafka's threads run in this process) shares the machine's cores: its
    # CPU per MB bounds what the broker can reach, TLS or not.
    client = (own1.user - own0.user) + (own1.system - own0.system)
    # The user share is where TLS costs (decryption, encryption, the loop): the kernel's
    # is mostly the copy into the page cache, the same on every listener and the part
    # that varies most from run to run on a shared machine.
    return {"mb_per_s": mb / seconds, "broker_cpu_s_per_mb": (user + kernel) / mb,
            "broker_user_cpu_s_per_mb": user / mb, "client_cpu_s_per_mb": client / mb}


def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="pykfk-security-bench-"))
    broker, ca = _start_broker(workdir, args.cipher_suites)
    value = os.urandom(args.size)
    mb = args.messages * args.size / 1e6
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in LISTENERS}
    try:
        # Untimed: each listener's first connections, logins and a first produce, so the
        # first timed run (PLAINTEXT's) meets a broker as warm as the later ones do.
        for listener in LISTENERS:
            _produce(_settings(broker, ca, listener), f"warm-{listener.lower()}", 20_000, value)
        for round_no in range(args.runs):
            for listener in LISTENERS:
                settings = _settings(broker, ca, listener)
                topic = f"bench-{listener.lower()}-{round_no}"
                produce = _timed(broker.pid, lambda s=settings, t=topic: _produce(s, t, args.messages, value), mb)
                consume = _timed(broker.pid, lambda s=settings, t=topic: _consume(s, t, args.messages), mb)
                runs[listener].append({"produce": produce, "consume": consume})
                print(f"run {round_no + 1}/{args.runs} {listener:10s} produce {produce['mb_per_s']:7.1f} MB/s "
                      f"{produce['broker_cpu_s_per_mb'] * 1000:6.2f} ms CPU/MB "
                      f"({produce['broker_user_cpu_s_per_mb'] * 1000:.2f} user, client {produce['client_cpu_s_per_mb'] * 1000:.2f}) | consume {consume['mb_per_s']:7.1f} "
                      f"MB/s {consume['broker_cpu_s_per_mb'] * 1000:6.2f} ms CPU/MB "
                      f"({consume['broker_user_cpu_s_per_mb'] * 1000:.2f} user)", flush=True)
    finally:
        broker.stop()
        # The broker's data (gigabytes of records a run) and the certificates: the
        # results are printed and written elsewhere.
        shutil.rmtree(workdir, ignore_errors=True)
    medians = _medians(runs)
    return {"messages": args.messages, "size": args.size, "runs": runs, "medians": medians,
            "ratios_to_plaintext": _ratios(medians), "load_average": os.getloadavg(),
            "cipher_suites": args.cipher_suites or "(default)", "produce_ceiling": produce_ceiling(medians)}


KEYS = ("mb_per_s", "broker_cpu_s_per_mb", "broker_user_cpu_s_per_mb", "client_cpu_s_per_mb")


def _medians(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    out = {}
    for listener, items in runs.items():
        out[listener] = {f"{side}_{key}": statistics.median(r[side][key] for r in items)
                         for side in ("produce", "consume") for key in KEYS}
    return out


def _ratios(medians: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Each listener's medians over PLAINTEXT's (the target: SASL_SSL produce MB/s >= 0.75x)."""
    base = medians["PLAINTEXT"]
    return {listener: {key: value / base[key] if base[key] else float("nan") for key, value in m.items()}
            for listener, m in medians.items() if listener != "PLAINTEXT"}


def report(result: dict[str, Any], out: Path) -> None:
    medians, base = result["medians"], result["medians"]["PLAINTEXT"]
    print(f"\n{result['messages']:,} records of {result['size']} B, medians of {len(result['runs']['PLAINTEXT'])} runs")
    print(f"{'listener':10s} {'produce MB/s':>15s} {'CPU ms/MB':>14s} {'user ms/MB':>14s}"
          f" {'consume MB/s':>15s} {'CPU ms/MB':>14s} {'user ms/MB':>14s}")
    for listener, m in medians.items():
        cells = []
        for side in ("produce", "consume"):
            for key, scale, width in (("mb_per_s", 1, 7), ("broker_cpu_s_per_mb", 1000, 6), ("broker_user_cpu_s_per_mb", 1000, 6)):
                value = m[f"{side}_{key}"]
                cells.append(f"{value * scale:{width}.{1 if scale == 1 else 2}f} ({value / base[f'{side}_{key}']:.2f}x)")
        print(f"{listener:10s} " + " ".join(cells))
    for line in ceiling_lines(medians):
        print(line)
    load = result.get("load_average")
    if load:
        print(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(result, indent=2))
    _plot(medians, out / "security.png")


def produce_ceiling(medians: dict[str, dict[str, float]], listener: str = "SASL_SSL") -> dict[str, float]:
    """What SASL_SSL/PLAINTEXT produce can reach when broker and client share the cores
    and both are CPU-bound (then MB/s goes as 1 / (broker + client CPU per MB)):
    ``now`` at the measured costs, ``free_broker_tls`` if the broker's TLS cost nothing
    (its PLAINTEXT cost, the client's TLS one): the client's own encryption alone caps it."""
    plain, tls = medians["PLAINTEXT"], medians[listener]
    plain_pair = plain["produce_broker_cpu_s_per_mb"] + plain["produce_client_cpu_s_per_mb"]
    tls_pair = tls["produce_broker_cpu_s_per_mb"] + tls["produce_client_cpu_s_per_mb"]
    free = plain["produce_broker_cpu_s_per_mb"] + tls["produce_client_cpu_s_per_mb"]
    return {"plaintext_pair_cpu_s_per_mb": plain_pair, "tls_pair_cpu_s_per_mb": tls_pair,
            "now": plain_pair / tls_pair, "free_broker_tls": plain_pair / free}


def ceiling_lines(medians: dict[str, dict[str, float]]) -> list[str]:
    if "produce_client_cpu_s_per_mb" not in medians["PLAINTEXT"]:
        return []
    c = produce_ceiling(medians)
    return [(f"produce CPU per MB, broker + client: PLAINTEXT {c['plaintext_pair_cpu_s_per_mb'] * 1000:.2f} ms, "
            f"SASL_SSL {c['tls_pair_cpu_s_per_mb'] * 1000:.2f} ms; CPU-bound ratio {c['now']:.2f}x, "
            f"{c['free_broker_tls']:.2f}x if the broker's TLS cost nothing")]


def _plot(medians: dict[str, dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    names = list(medians)
    for ax, key, title in [(axes[0], "mb_per_s", "throughput (MB/s)"), (axes[1], "broker_cpu_s_per_mb", "broker CPU (ms per MB)")]:
        scale = 1000 if key == "broker_cpu_s_per_mb" else 1
        width = 0.38
        for i, side in enumerate(("produce", "consume")):
            ax.bar([x + i * width for x in range(len(names))], [medians[n][f"{side}_{key}"] * scale for n in names],
                   width, label=side)
        ax.set_xticks([x + width / 2 for x in range(len(names))], names)
        ax.set_title(title)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.security", description=__doc__)
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cipher-suites", default="",
                        help="the broker's ssl.cipher.suites (default: its own, TLS_AES_128_GCM_SHA256 first)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "last-run"))
    args = parser.parse_args(argv)
    report(run(args), Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
