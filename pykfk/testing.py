"""pytest plugin shipped with pykfk: fixtures that give tests a real broker.

Registered through the ``pytest11`` entry point, so any project that installs pykfk can
ask for these fixtures:

- ``pykfk_broker``: a broker *process* (``python -m pykfk.broker``) on a free 127.0.0.1
  port with its log dir under the test's tmp_path; stopped with SIGTERM at teardown.
  ``pykfk_broker.bootstrap`` is the ``host:port`` string clients take.
- ``pykfk_broker_inprocess``: the same broker running on an event loop in a thread of the
  test process (faster to start; the test fails if the loop reports an unhandled error).
- ``pykfk_broker_factory``: ``factory(log_dir=None, **overrides)`` starts more broker
  processes (Kafka property names, dots or underscores: ``log_segment_bytes=1024``); all
  are stopped at teardown.

- ``zookeeper_server``: a real ZooKeeper (Debian's ``zookeeper`` package jars, run as a
  standalone ``QuorumPeerMain`` on a free 127.0.0.1 port, tickTime 200 ms so sessions can
  be short) shared by the whole test session; ``zookeeper_server.connect_string(chroot)``.
  ``PYKFK_TEST_ZOOKEEPER=host:port`` uses an existing server instead.
- ``zookeeper_chroot``: a fresh chroot connect string per test (``127.0.0.1:port/t-<hex>``)
  so tests sharing the server never see each other's znodes.

``BrokerProcess`` is usable outside pytest too: start, stop (SIGTERM), kill (SIGKILL),
restart on the same port, read the server log and the process RSS. ``ZooKeeperServer``
likewise: start, stop, and ``expire_session`` (the same-session-id close that expires
a client's session on the server at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from pykfk.protocol import framing

if TYPE_CHECKING:
    from pykfk.broker import Broker

DEFAULT_START_TIMEOUT = 30.0
DEFAULT_STOP_TIMEOUT = 30.0


class RawClient:
    """One TCP connection speaking request/response frames, nothing clever: tests send
    exactly the bytes they mean, hostile or not."""

    def __init__(self, host: str, port: int, timeout: float = 10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._next_correlation = 1

    def close(self) -> None:
        self.sock.close()

    def send(self, api_key: int, version: int, body: dict[str, Any], client_id: str | None = "raw") -> int:
        correlation_id = self._next_correlation
        self._next_correlation += 1
        self.sock.sendall(framing.encode_request(api_key, version, correlation_id, client_id, body))
        return correlation_id

    def login_plain(self, user: str, password: str) -> None:
        """SASL/PLAIN on this connection (SaslHandshake v1, SaslAuthenticate v1);
        AssertionError unless both succeed."""
        assert self.call(17, 1, {"mechanism": "PLAIN"}).error_code == 0  # type: ignore[attr-defined]
        answer = self.call(36, 1, {"auth_bytes": f"\0{user}\0{password}".encode()})
        assert answer.error_code == 0, answer.error_message  # type: ignore[attr-defined]

    def recv_frame(self) -> bytes:
        size = struct.unpack(">i", self._recv_exactly(4))[0]
        return self._recv_exactly(size)

    def recv(self, api_key: int, version: int) -> tuple[int, object]:
        return framing.decode_response(api_key, version, self.recv_frame())

    def call(self, api_key: int, version: int, body: dict[str, Any]) -> object:
        correlation_id = self.send(api_key, version, body)
        got, response = self.recv(api_key, version)
        assert got == correlation_id
        return response

    def _recv_exactly(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(min(n, 1 << 20))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def is_closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True when the broker closes the connection (EOF or reset) within ``timeout``."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False


_Value = TypeVar("_Value")


def wait_until(condition: Callable[[], _Value], timeout: float, what: str, interval: float = 0.1) -> _Value:
    """Call ``condition`` every ``interval`` s until it returns something true, and return
    that; AssertionError naming ``what`` once ``timeout`` s have passed. The condition is
    asked once more at the deadline, so a slow machine never fails a check that holds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(max(0.0, min(interval, deadline - time.monotonic())))


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (for restarting on a known port)."""
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def _property_name(name: str) -> str:
    return name if "." in name else name.replace("_", ".")


class BrokerProcess:
    """A ``pykfk-broker`` subprocess on 127.0.0.1 with its own log dir.

    ``overrides`` take Kafka property names. The first start binds a free port (port 0);
    restarts reuse it, so clients can reconnect to the same address. With a
    ``listeners`` override, ``ports`` maps each listener name to its bound port (and
    restarts reuse those too).
    """

    def __init__(
        self,
        log_dir: str,
        overrides: Mapping[str, Any] | None = None,
        *,
        log_level: str = "INFO",
        port: int = 0,
    ):
        self.log_dir = log_dir
        self.overrides = {_property_name(k): v for k, v in (overrides or {}).items()}
        self.log_level = log_level
        self.host = "127.0.0.1"
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None
        self.ports: dict[str, int] = {}
        os.makedirs(log_dir, exist_ok=True)
        self.server_log = os.path.join(os.path.dirname(os.path.abspath(log_dir)), os.path.basename(log_dir) + ".server.log")
        self._ready_file = self.server_log + ".ready"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "broker not started"
        return self.proc.pid

    def command(self) -> list[str]:
        props = {"log.dirs": self.log_dir, "listeners": f"PLAINTEXT://{self.host}:{self.port}"}
        props.update({k: str(v) for k, v in self.overrides.items()})
        if "listeners" in self.overrides and self.ports:
            # A restart binds the ports the first start got.
            props["listeners"] = re.sub(
                r"([A-Za-z_][A-Za-z0-9_]*)://([^,]*):0\b",
                lambda m: f"{m.group(1)}://{m.group(2)}:{self.ports.get(m.group(1).upper(), 0)}",
                props["listeners"])
        args = [sys.executable, "-m", "pykfk.broker", "--log-level", self.log_level, "--ready-file", self._ready_file]
        for key, value in props.items():
            args += ["--override", f"{key}={value}"]
        return args

    def start(self, timeout: float = DEFAULT_START_TIMEOUT) -> BrokerProcess:
        """Start and wait until the broker accepts connections."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError("broker already running")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._ready_file)
        log_file = open(self.server_log, "ab")  # noqa: SIM115 - handed to the child process, closed below
        try:
            self.proc = subprocess.Popen(self.command(), stdout=log_file, stderr=subprocess.STDOUT)
        finally:
            log_file.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if os.path.exists(self._ready_file):
                with open(self._ready_file, encoding="utf-8") as f:
                    ready = json.load(f)
                self.port = int(ready["port"])
                self.ports = {str(k): int(v) for k, v in ready.get("listeners", {}).items()}
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log_tail()}")
            time.sleep(0.02)
        self.kill()
        raise TimeoutError(f"broker did not start within {timeout}s:\n{self.log_tail()}")

    def stop(self, timeout: float = DEFAULT_STOP_TIMEOUT) -> int:
        """SIGTERM and wait; returns the exit status (SIGKILL after ``timeout``)."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL: an unclean stop, as after a crash or power loss of the process."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def restart(self, timeout: float = DEFAULT_START_TIMEOUT, *, clean: bool = True) -> BrokerProcess:
        """Stop (SIGTERM, or SIGKILL when ``clean`` is False) and start on the same port."""
        if clean:
            self.stop()
        else:
            self.kill()
        return self.start(timeout)

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def rss_kb(self) -> int:
        """Resident set size of the broker process (VmRSS), in KiB."""
        with open(f"/proc/{self.pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError("VmRSS not found")

    def log_text(self) -> str:
        try:
            with open(self.server_log, encoding="utf-8", errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def __enter__(self) -> BrokerProcess:  # noqa: PYI034 - Python 3.10 has no typing.Self
        return self.start() if not self.is_running() else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class InProcessBroker:
    """A Broker on its own event loop in a daemon thread of this process."""

    def __init__(self, log_dir: str, overrides: Mapping[str, Any] | None = None):
        from pykfk.config import BrokerConfig

        props = {"log.dirs": log_dir, "listeners": "PLAINTEXT://127.0.0.1:0"}
        props.update({_property_name(k): str(v) for k, v in (overrides or {}).items()})
        self.config = BrokerConfig(props)
        self.broker: Broker | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.loop_errors: list[dict[str, Any]] = []
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._stop: asyncio.Event | None = None
        self._start_error: BaseException | None = None

    @property
    def host(self) -> str:
        return self._started_broker().host

    @property
    def port(self) -> int:
        return self._started_broker().port

    def _started_broker(self) -> Broker:
        if self.broker is None:
            raise RuntimeError("the in-process broker is not started")
        return self.broker

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = DEFAULT_START_TIMEOUT) -> InProcessBroker:
        self._thread = threading.Thread(target=self._run, name="pykfk-broker", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout):
            raise TimeoutError("in-process broker did not start")
        if self._start_error is not None:
            raise RuntimeError("in-process broker failed to start") from self._start_error
        return self

    def _run(self) -> None:
        from pykfk.broker import Broker

        try:
            import uvloop  # the event loop pykfk-broker runs on

            loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        except ImportError:
            loop = asyncio.new_event_loop()
        self.loop = loop
        loop.set_exception_handler(lambda _loop, context: self.loop_errors.append(context))

        async def serve() -> None:
            self._stop = asyncio.Event()
            self.broker = Broker(self.config)
            try:
                await self.broker.start()
            except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
                self._start_error = exc
                self._started.set()
                await self.broker.stop()
                return
            self._started.set()
            await self._stop.wait()
            await self.broker.stop()

        try:
            loop.run_until_complete(serve())
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def call(self, coro_fn: Any, timeout: float = 30.0) -> Any:
        """Run ``coro_fn()`` on the broker's loop and return its result."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro_fn(), self.loop).result(timeout)

    def stop(self, timeout: float = DEFAULT_STOP_TIMEOUT) -> None:
        if self._thread is None:
            return
        if self.loop is not None and self._stop is not None and not self.loop.is_closed():
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError("in-process broker did not stop")
        self._thread = None


@pytest.fixture
def pykfk_broker(tmp_path: Any) -> Iterator[BrokerProcess]:
    """A broker process on a free loopback port with a temporary log dir."""
    broker = BrokerProcess(str(tmp_path / "pykfk-data"))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def pykfk_broker_inprocess(tmp_path: Any) -> Iterator[InProcessBroker]:
    """A broker on an event loop thread of the test process."""
    broker = InProcessBroker(str(tmp_path / "pykfk-data"))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
    if broker.loop_errors:
        pytest.fail(f"unhandled errors on the broker loop: {broker.loop_errors}")


@pytest.fixture
def pykfk_broker_factory(tmp_path: Any) -> Iterator[Any]:
    """``factory(log_dir=None, *, log_level="INFO", **overrides) -> BrokerProcess`` (started)."""
    started: list[BrokerProcess] = []

    def factory(log_dir: str | None = None, *, log_level: str = "INFO", **overrides: Any) -> BrokerProcess:
        directory = log_dir or tempfile.mkdtemp(prefix="pykfk-data-", dir=str(tmp_path))
        broker = BrokerProcess(directory, overrides, log_level=log_level)
        started.append(broker)
        return broker.start()

    try:
        yield factory
    finally:
        for broker in started:
            broker.stop()


# ---------------------------------------------------------------------------------------
# ZooKeeper

ZOOKEEPER_JARS = ("/usr/share/java/zookeeper.jar",)
SLF4J_BINDINGS = ("/usr/share/java/slf4j-simple.jar", "/usr/share/java/slf4j-nop.jar")
ZOOKEEPER_ENV = "PYKFK_TEST_ZOOKEEPER"


def four_letter_word(host: str, port: int, word: bytes, timeout: float = 2.0) -> bytes:
    """Send a ZooKeeper four-letter command (``srvr``, ``ruok``...) and return the answer."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word)
        chunks = []
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


class ZooKeeperServer:
    """A standalone ZooKeeper server process on 127.0.0.1 with its data in ``directory``.

    ``tick_ms`` 200 lets sessions be as short as 400 ms (ZooKeeper clamps a client's
    session timeout to [2, 20] ticks unless ``max_session_ms`` widens it). Java and
    Debian's ``zookeeper`` package (``libzookeeper-java``) must be installed.
    """

    def __init__(self, directory: str, *, port: int = 0, tick_ms: int = 200, max_session_ms: int = 30000):
        self.dir = os.path.abspath(directory)
        self.host = "127.0.0.1"
        self.port = port
        self.tick_ms = tick_ms
        self.max_session_ms = max_session_ms
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = os.path.join(self.dir, "zookeeper.log")

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"

    def connect_string(self, chroot: str | None = None) -> str:
        return self.connect + ("/" + chroot.strip("/") if chroot else "")

    @staticmethod
    def classpath() -> str:
        """zookeeper.jar (its manifest lists the Debian jars it needs) plus one slf4j binding."""
        jar = next((j for j in ZOOKEEPER_JARS if os.path.exists(j)), None)
        if jar is None or shutil.which("java") is None:
            raise RuntimeError("ZooKeeper needs java and Debian's zookeeper package (apt-get install zookeeper)")
        binding = next((b for b in SLF4J_BINDINGS if os.path.exists(b)), None)
        return jar + (f":{binding}" if binding else "")

    def start(self, timeout: float = DEFAULT_START_TIMEOUT) -> ZooKeeperServer:
        os.makedirs(os.path.join(self.dir, "data"), exist_ok=True)
        if not self.port:
            self.port = free_port(self.host)
        config = os.path.join(self.dir, "zoo.cfg")
        with open(config, "w", encoding="ascii") as f:
            f.write(
                f"tickTime={self.tick_ms}\n"
                f"dataDir={self.dir}/data\n"
                f"clientPort={self.port}\n"
                f"clientPortAddress={self.host}\n"
                f"maxSessionTimeout={self.max_session_ms}\n"
                "maxClientCnxns=0\n"
                "admin.enableServer=false\n"
                "4lw.commands.whitelist=ruok,srvr,stat,mntr,cons\n"
                "forceSync=no\n"
                "preAllocSize=4096\n"
            )
        command = [
            "java", "-Xms16m", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-cp", self.classpath(), "org.apache.zookeeper.server.quorum.QuorumPeerMain", config,
        ]
        with open(self.log_path, "ab") as log_file:
            self.proc = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        # The port opens before the database is loaded; "srvr" answers with a Mode line
        # only once the server really serves.
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if b"Mode:" in four_letter_word(self.host, self.port, b"srvr", timeout=1.0):
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"ZooKeeper did not start within {timeout}s:\n{self.log_tail()}")

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)

    def log_tail(self, lines: int = 30) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return "\n".join(f.read().splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def expire_session(self, session_id: int, password: bytes, timeout: float = 10.0) -> None:
        """Expire a client's session now: open a second connection with the same session
        id and password, then close it; the server drops the session and its ephemeral
        znodes, and the first client sees its session as expired."""
        expire_session(self.connect, session_id, password, timeout)


def expire_session(connect: str, session_id: int, password: bytes, timeout: float = 10.0) -> None:
    from kazoo.client import KazooClient

    client = KazooClient(hosts=connect, client_id=(session_id, password), timeout=max(timeout, 1.0))
    client.start(timeout=timeout)
    client.stop()
    client.close()


@pytest.fixture(scope="session")
def zookeeper_server(tmp_path_factory: Any) -> Iterator[Any]:
    """A ZooKeeper server for the test session (or the one PYKFK_TEST_ZOOKEEPER names)."""
    existing = os.environ.get(ZOOKEEPER_ENV)
    if existing:
        host, _, port = existing.rpartition(":")
        server = ZooKeeperServer(str(tmp_path_factory.mktemp("zookeeper")), port=int(port))
        server.host = host or "127.0.0.1"
        yield server
        return
    server = ZooKeeperServer(str(tmp_path_factory.mktemp("zookeeper")))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def zookeeper_chroot(zookeeper_server: Any) -> str:
    """A connect string with a fresh chroot: the test's own empty ZooKeeper namespace."""
    connect: str = zookeeper_server.connect_string(f"t-{uuid.uuid4().hex[:12]}")
    return connect
