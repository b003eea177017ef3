"""Fixtures for pykfk's own clients: broker processes and a real ZooKeeper server.

ZooKeeper: Debian's ``zookeeper`` package jars run as a standalone QuorumPeerMain on a
free 127.0.0.1 port with a temporary zoo.cfg (tickTime 200 so sessions of 1-4 s are
allowed). ``PYKFK_TEST_ZOOKEEPER=host:port`` points the tests at an existing server
instead.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from pykfk.testing import BrokerProcess, free_port

ZK_JAR_CANDIDATES = ["/usr/share/java/zookeeper.jar"]
SLF4J_CANDIDATES = [
    "/usr/share/java/slf4j-simple.jar",
    *sorted(glob.glob("/usr/share/java/slf4j-simple-*.jar")),
]


def _four_letter(port: int, word: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
        s.sendall(word)
        out = b""
        while True:
            data = s.recv(4096)
            if not data:
                return out
            out += data


class ZooKeeperServer:
    def __init__(self, directory: str):
        self.dir = directory
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> ZooKeeperServer:
        zk_jar = next((p for p in ZK_JAR_CANDIDATES if os.path.exists(p)), None)
        slf4j = next((p for p in SLF4J_CANDIDATES if os.path.exists(p)), None)
        java = shutil.which("java")
        if not (zk_jar and java):
            pytest.fail(
                "ZooKeeper tests need java and Debian's zookeeper package (apt-get install zookeeper)"
            )
        self.port = free_port()
        os.makedirs(f"{self.dir}/data", exist_ok=True)
        with open(f"{self.dir}/zoo.cfg", "w") as f:
            f.write(
                "tickTime=200\n"
                f"dataDir={self.dir}/data\n"
                f"clientPort={self.port}\n"
                "clientPortAddress=127.0.0.1\n"
                "maxClientCnxns=0\n"
                "minSessionTimeout=400\n"
                "maxSessionTimeout=10000\n"
                "admin.enableServer=false\n"
                "4lw.commands.whitelist=ruok,srvr,stat,cons\n"
                "forceSync=no\n"
                "preAllocSize=4096\n"
            )
        classpath = zk_jar + (f":{slf4j}" if slf4j else "")
        log = open(f"{self.dir}/zookeeper.log", "ab")  # noqa: SIM115 - closed once the child has it
        try:
            self.proc = subprocess.Popen(
                [
                    java,
                    "-Xms16m",
                    "-Xmx128m",
                    "-XX:+UseSerialGC",
                    "-XX:TieredStopAtLevel=1",
                    "-cp",
                    classpath,
                    "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                    f"{self.dir}/zoo.cfg",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}")
            try:
                # The port opens before the database is loaded; "Mode:" means serving.
                if b"Mode:" in _four_letter(self.port, b"srvr"):
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise TimeoutError("ZooKeeper did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: Any) -> Iterator[str]:
    """A ZooKeeper connect string (one server for the whole session)."""
    existing = os.environ.get("PYKFK_TEST_ZOOKEEPER")
    if existing:
        yield existing
        return
    server = ZooKeeperServer(str(tmp_path_factory.mktemp("zookeeper")))
    server.start()
    try:
        yield server.connect
    finally:
        server.stop()


@pytest.fixture
def zk_chroot(zookeeper: str) -> Iterator[str]:
    """A connect string with a fresh chroot, so tests never see each other's znodes."""
    from kazoo.client import KazooClient

    chroot = f"/pykfk-test-{uuid.uuid4().hex[:10]}"
    zk = KazooClient(hosts=zookeeper)
    zk.start(timeout=10)
    zk.ensure_path(chroot)
    zk.stop()
    zk.close()
    yield zookeeper + chroot


def register_broker(zk_connect: str, broker: BrokerProcess, broker_id: int = 0) -> Any:
    """Publish a broker at /brokers/ids/<id> the way a ZooKeeper-mode broker does (JSON with
    host, port and endpoints, ephemeral). Returns the kazoo client holding the session."""
    import json

    from kazoo.client import KazooClient

    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=10)
    zk.ensure_path("/brokers/ids")
    zk.ensure_path("/brokers/topics")
    data = {
        "version": 4,
        "host": broker.host,
        "port": broker.port,
        "endpoints": [f"PLAINTEXT://{broker.host}:{broker.port}"],
        "jmx_port": -1,
        "timestamp": str(int(time.time() * 1000)),
    }
    zk.create(f"/brokers/ids/{broker_id}", json.dumps(data).encode(), ephemeral=True)
    return zk


# A broker that answers the first JoinGroup of a group at once (Kafka waits 3 s by default
# to gather the first members) and lets members ask for short sessions.
BROKER_OVERRIDES = {
    "num.partitions": 4,
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
    "offsets.topic.num.partitions": 4,
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: Any) -> Iterator[BrokerProcess]:
    """One broker process for a test module (topics are named per test)."""
    b = BrokerProcess(str(tmp_path_factory.mktemp("broker") / "data"), BROKER_OVERRIDES)
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def topic() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"
