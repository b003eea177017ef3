"""The systems under test, each started on 127.0.0.1 by itself and stopped by its PID.

- ``PykfkService``: ``pykfk-broker`` through ``pykfk.testing.BrokerProcess``.
- ``RabbitMQService``: Debian's ``rabbitmq-server`` run as a plain process (no systemd)
  with its own node name, mnesia/log dirs, AMQP port and distribution port, and its own
  ``epmd`` on a private port, all bound to loopback.
- ``ActiveMQService``: Debian's ``activemq`` (``activemq.jar start xbean:...``) with a
  generated config in a temp dir: KahaDB, journal never fsynced, OpenWire and STOMP
  connectors on 127.0.0.1 only.

Also the facts read from /proc (CPU seconds, resident memory) and from the file system
(bytes stored), and the Java peer client compiled at run time.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from pykfk.testing import BrokerProcess, free_port

HERE = Path(__file__).resolve().parent
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

RABBITMQ_SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"
ACTIVEMQ_HOME = "/usr/share/activemq"
ACTIVEMQ_JAR = f"{ACTIVEMQ_HOME}/bin/activemq.jar"
# Debian's Java client jars for the peers (packages librabbitmq-client-java, activemq).
RABBITMQ_CLIENT_JARS = ["/usr/share/java/amqp-client.jar", "/usr/share/java/slf4j-api.jar"]
ACTIVEMQ_CLIENT_JARS_GLOB = f"{ACTIVEMQ_HOME}/lib/*.jar"


# ---------------------------------------------------------------- /proc and disk facts

def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, all its threads (fields 14-15 of stat)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        # The command name (field 2) may hold spaces; the fields after it are plain.
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _status_kb(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1])
    return 0


def rss_kb(pid: int) -> int:
    return _status_kb(pid, "VmRSS:")


def peak_rss_kb(pid: int) -> int:
    """VmHWM: the largest resident set since the process started."""
    return _status_kb(pid, "VmHWM:")


def allocated_bytes(path: str | os.PathLike[str]) -> int:
    """Bytes the file system allocated under ``path`` (st_blocks, like ``du``): sparse
    or preallocated files count what they really hold on disk."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


def apparent_bytes(path: str | os.PathLike[str]) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


class RssSampler:
    """Largest VmRSS of a process seen while a run goes (sampled every 50 ms)."""

    def __init__(self, pid: int | None, interval: float = 0.05):
        self.pid = pid
        self.interval = interval
        self.peak_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(OSError, ValueError):
                self.peak_kb = max(self.peak_kb, rss_kb(self.pid))  # type: ignore[arg-type]
            self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:  # noqa: PYI034 - final in practice
        if self.pid is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


def wait_for_port(host: str, port: int, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
            return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listening on {host}:{port} after {timeout}s")


def stop_pid(proc: subprocess.Popen[bytes] | None, timeout: float = 60.0) -> None:
    """SIGTERM the process we started, SIGKILL it if it does not exit in time."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


# ---------------------------------------------------------------- services

class Service:
    """A broker process this harness started. ``pid`` is the process measured."""

    name = "?"
    host = "127.0.0.1"
    port = 0
    data_dir = ""
    config_note = ""

    @property
    def pid(self) -> int | None:
        raise NotImplementedError

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def queue_bytes(self, queue: str) -> int | None:
        """Bytes stored for one topic/queue, when the system keeps them apart."""
        return None


class PykfkService(Service):
    name = "pykfk"

    def __init__(self, workdir: str):
        self.data_dir = os.path.join(workdir, "pykfk-data")
        # No fsync per message or per interval: the OS writes pages back on its own
        # schedule (the paper's asynchronous flush; pykfk's default, stated here so a
        # changed default cannot silently change the experiment).
        overrides = {
            "log.flush.interval.messages": 2**63 - 1,
            "num.partitions": 1,
            "auto.create.topics.enable": "true",
        }
        self.config_note = "no fsync (log.flush.interval.messages=max), 1 partition, segment 1 GiB"
        self.broker = BrokerProcess(self.data_dir, overrides, log_level="WARNING")

    @property
    def pid(self) -> int | None:
        return self.broker.pid if self.broker.is_running() else None

    def start(self) -> None:
        self.broker.start(timeout=60)
        self.port = self.broker.port

    def stop(self) -> None:
        self.broker.stop()

    def queue_bytes(self, queue: str) -> int | None:
        path = os.path.join(self.data_dir, f"{queue}-0")
        return allocated_bytes(path) if os.path.isdir(path) else None

    def partition_dir(self, queue: str) -> str:
        return os.path.join(self.data_dir, f"{queue}-0")


class RabbitMQService(Service):
    name = "rabbitmq"

    def __init__(self, workdir: str):
        self.root = os.path.join(workdir, "rabbitmq")
        self.data_dir = os.path.join(self.root, "mnesia")
        self.proc: subprocess.Popen[bytes] | None = None
        self.epmd: subprocess.Popen[bytes] | None = None
        self.config_note = (
            "durable queue, persistent messages (delivery mode 2), classic queue, "
            "fsync on RabbitMQ's own schedule (no confirms: asynchronous)"
        )

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def start(self) -> None:
        os.makedirs(self.root, exist_ok=True)
        self.port = free_port()
        dist_port = free_port()
        epmd_port = free_port()
        with open(os.path.join(self.root, "rabbitmq.conf"), "w", encoding="ascii") as f:
            f.write(f"listeners.tcp.default = 127.0.0.1:{self.port}\n")
        with open(os.path.join(self.root, "enabled_plugins"), "w", encoding="ascii") as f:
            f.write("[].\n")
        # Our own epmd in the foreground, so it is ours to stop (rabbitmq-server would
        # otherwise start a shared daemon that outlives it).
        with open(os.path.join(self.root, "epmd.log"), "ab") as epmd_log:
            self.epmd = subprocess.Popen(
                ["epmd", "-port", str(epmd_port), "-address", "127.0.0.1"],
                stdout=epmd_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )
        wait_for_port("127.0.0.1", epmd_port, self.epmd, 10)
        env = dict(os.environ)
        env.update({
            "HOME": self.root,  # the Erlang cookie lives here
            "RABBITMQ_CONF_ENV_FILE": "/dev/null",
            "RABBITMQ_NODENAME": f"pkbench{self.port}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(dist_port),
            "ERL_EPMD_PORT": str(epmd_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_MNESIA_BASE": self.data_dir,
            "RABBITMQ_LOG_BASE": os.path.join(self.root, "log"),
            "RABBITMQ_CONFIG_FILE": os.path.join(self.root, "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": os.path.join(self.root, "enabled_plugins"),
            "RABBITMQ_PID_FILE": os.path.join(self.root, "rabbitmq.pid"),
            # ALLOW_INPUT makes the script exec erl (so our PID is the VM itself);
            # -noinput keeps the VM from reading stdin.
            "RABBITMQ_ALLOW_INPUT": "1",
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-noinput -kernel inet_dist_use_interface {127,0,0,1}",
        })
        with open(os.path.join(self.root, "server.out"), "ab") as out:
            self.proc = subprocess.Popen(
                [RABBITMQ_SERVER], env=env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, cwd=self.root,
            )
        try:
            wait_for_port("127.0.0.1", self.port, self.proc, 120)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        stop_pid(self.proc)
        stop_pid(self.epmd, 10)


class ActiveMQService(Service):
    name = "activemq"

    def __init__(self, workdir: str, heap_mb: int = 512):
        self.root = os.path.join(workdir, "activemq")
        self.data_dir = os.path.join(self.root, "data")
        self.heap_mb = heap_mb  # Debian's default (/usr/share/activemq/activemq-options)
        self.proc: subprocess.Popen[bytes] | None = None
        self.stomp_port = 0
        self.config_note = (
            "persistent messages, KahaDB with journalDiskSyncStrategy=never "
            f"(asynchronous), heap {heap_mb} MiB"
        )

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def _write_config(self, conf: str) -> str:
        path = os.path.join(conf, "activemq.xml")
        with open(path, "w", encoding="utf-8") as f:
            f.write(f"""<beans xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
  http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">
  <broker xmlns="http://activemq.apache.org/schema/core" useJmx="false" brokerName="pkbench"
          persistent="true" dataDirectory="{self.data_dir}">
    <persistenceAdapter>
      <kahaDB directory="{self.data_dir}/kahadb" journalDiskSyncStrategy="never"/>
    </persistenceAdapter>
    <transportConnectors>
      <transportConnector name="openwire" uri="tcp://127.0.0.1:{self.port}"/>
      <transportConnector name="stomp" uri="stomp://127.0.0.1:{self.stomp_port}"/>
    </transportConnectors>
  </broker>
</beans>
""")
        with open(os.path.join(conf, "log4j.properties"), "w", encoding="ascii") as f:
            f.write("log4j.rootLogger=WARN, out\nlog4j.appender.out=org.apache.log4j.ConsoleAppender\n"
                    "log4j.appender.out.layout=org.apache.log4j.PatternLayout\n")
        return path

    def start(self) -> None:
        conf = os.path.join(self.root, "conf")
        os.makedirs(conf, exist_ok=True)
        os.makedirs(self.data_dir, exist_ok=True)
        self.port = free_port()
        self.stomp_port = free_port()
        config = self._write_config(conf)
        cmd = [
            "java", f"-Xms{self.heap_mb}M", f"-Xmx{self.heap_mb}M",
            f"-Dactivemq.home={ACTIVEMQ_HOME}", f"-Dactivemq.base={self.root}",
            f"-Dactivemq.conf={conf}", f"-Dactivemq.data={self.data_dir}",
            f"-Dactivemq.classpath={conf}", f"-Dlog4j.configuration=file:{conf}/log4j.properties",
            "-jar", ACTIVEMQ_JAR, "start", f"xbean:file:{config}",
        ]
        with open(os.path.join(self.root, "server.out"), "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=self.root)
        try:
            wait_for_port("127.0.0.1", self.port, self.proc, 120)
            wait_for_port("127.0.0.1", self.stomp_port, self.proc, 30)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        stop_pid(self.proc)


# ---------------------------------------------------------------- availability

def rabbitmq_available() -> bool:
    return os.access(RABBITMQ_SERVER, os.X_OK) and shutil.which("epmd") is not None


def activemq_available() -> bool:
    return os.path.exists(ACTIVEMQ_JAR) and shutil.which("java") is not None


def java_client_available(system: str) -> bool:
    if shutil.which("javac") is None:
        return False
    if system == "rabbitmq":
        return all(os.path.exists(j) for j in RABBITMQ_CLIENT_JARS)
    return bool(glob.glob(ACTIVEMQ_CLIENT_JARS_GLOB))


def java_classpath() -> str:
    jars = [j for j in RABBITMQ_CLIENT_JARS if os.path.exists(j)]
    jars += sorted(glob.glob(ACTIVEMQ_CLIENT_JARS_GLOB))
    return ":".join(jars)


def compile_java_client(build_dir: str) -> str:
    """Compile PeerClient.java into ``build_dir``; returns the run-time classpath."""
    os.makedirs(build_dir, exist_ok=True)
    classpath = java_classpath()
    subprocess.run(
        ["javac", "-nowarn", "-d", build_dir, "-cp", classpath, str(HERE / "PeerClient.java")],
        check=True, capture_output=True, timeout=300,
    )
    return f"{build_dir}:{classpath}"
