"""``pykfk-broker [server.properties] [--override key=value ...]``: run one broker.

Standalone with embedded metadata (no ZooKeeper) by default, on 127.0.0.1:9092 with its
data under ``./data``; with ``zookeeper.connect`` set, a member of a cluster coordinated
through ZooKeeper, and SIGTERM first moves its partition leaderships to other brokers
(controlled shutdown). SIGTERM or SIGINT stop it cleanly: stop accepting, answer requests
already read, flush, write checkpoints, exit 0 (the next start then skips the recovery
scan). SIGHUP re-reads server.properties and applies its dynamic settings.

Under systemd (``docs/service.md``, the unit from ``--print-systemd-unit``) it reports
READY=1 once it serves and STOPPING=1 when it begins to stop; ``--log-format json``
writes its log as JSON lines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import resource
import shutil
import signal
import sys
import sysconfig
import time
from collections.abc import Mapping, Sequence
from typing import Any

from pykfk._core.segment import set_open_sealed_segments_limit
from pykfk.broker import Broker
from pykfk.config import BROKER_KEYS, BrokerConfig, ConfigError
from pykfk.service import example_config_text, unit_file_text
from pykfk.service.log_format import configure_logging
from pykfk.service.notify import notify, watchdog_interval_s

log = logging.getLogger("pykfk.broker")


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="pykfk-broker",
        description="Run a pykfk broker (Kafka protocol): standalone with embedded metadata, "
        "or a member of a cluster when zookeeper.connect is set.",
    )
    parser.add_argument("config", nargs="?", help="a server.properties file (Kafka's names)")
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a property, taking precedence over the file (repeatable)",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="logging threshold (default INFO)",
    )
    parser.add_argument(
        "--log-format",
        default="text",
        choices=["text", "json"],
        help="stderr log lines: readable text (default) or JSON objects "
        "(time, level, logger, message, exception)",
    )
    parser.add_argument(
        "--ready-file",
        help="once accepting connections, write {host, port, pid} as JSON to this file",
    )
    parser.add_argument(
        "--print-systemd-unit",
        action="store_true",
        help="print a systemd unit that runs this pykfk-broker with /etc/pykfk/server.properties, and exit",
    )
    parser.add_argument(
        "--print-example-config",
        action="store_true",
        help="print an example /etc/pykfk/server.properties for that unit, and exit",
    )
    return parser.parse_args(argv)


def _write_ready_file(path: str, broker: Broker) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"host": broker.host, "port": broker.port, "pid": os.getpid(),
                   "listeners": {name: port for name, (_host, port) in broker.bound.items()}}, f)
    os.replace(tmp, path)


def raise_open_files_limit() -> tuple[int, int]:
    """Raise this process's soft limit of open files to its hard limit, as a broker
    holding files for thousands of partitions needs; returns (before, after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == resource.RLIM_INFINITY or soft >= hard:
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as exc:
        log.warning("cannot raise the open files limit from %d to %d: %s", soft, hard, exc)
        return soft, soft
    log.info("open files limit raised from %d to %d", soft, hard)
    return soft, hard


def max_map_count() -> int | None:
    """The kernel's limit of memory mappings per process (vm.max_map_count), or None."""
    try:
        with open("/proc/sys/vm/max_map_count", encoding="ascii") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def size_sealed_segment_lru(open_files_limit: int, map_count_limit: int | None = None) -> int:
    """Sealed segments whose .log stays open and whose two indexes stay mapped between
    uses: an eighth of the open-files limit (between 64 and 4,096), and at most an eighth
    of the mappings vm.max_map_count allows; the rest is left to active segments (one
    descriptor and two mappings each), connections and the interpreter."""
    limit = min(max(open_files_limit // 8, 64), 4096)
    if map_count_limit is not None:
        limit = max(min(limit, map_count_limit // 16), 1)
    set_open_sealed_segments_limit(limit)
    return limit


class _Reloader:
    """SIGHUP: re-read server.properties (and the command line's overrides over it) and
    hand the result to the running broker. A signal that comes while the broker starts
    is applied once it serves."""

    def __init__(self, broker: Broker, path: str | None, overrides: Sequence[str]):
        self.broker = broker
        self.path = path
        self.overrides = list(overrides)
        self.serving = False
        self.pending = False

    def on_signal(self) -> None:
        if self.broker.stopping:
            return
        if self.serving:
            self.reload_notifying()
        else:
            self.pending = True

    def now_serving(self) -> None:
        self.serving = True
        if self.pending:
            self.reload_notifying()

    def reload_notifying(self) -> None:
        """Reload between RELOADING=1 and READY=1, as sd_notify(3) asks of a service
        whose reload is a signal: the manager then knows when it is done."""
        notify("RELOADING=1", f"MONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}",
               f"STATUS=re-reading {self.path}")
        try:
            self.reload()
        finally:
            notify("READY=1", f"STATUS=serving on {_listeners_text(self.broker)}")

    def reload(self) -> None:
        if self.path is None:
            log.warning("SIGHUP: no server.properties to re-read (the broker was started without one)")
            return
        try:
            props = BrokerConfig.load(self.path, self.overrides).originals
        except OSError as exc:
            log.warning("SIGHUP: cannot read %s: %s; settings not reloaded", self.path, exc.strerror or exc)
            return
        except ConfigError as exc:
            log.warning("SIGHUP: %s in %s; settings not reloaded", exc, self.path)
            return
        props, restart_only = keep_static_settings(props, self.broker.config.originals)
        for name in restart_only:
            log.warning("SIGHUP: %s changed in %s: takes effect at the next restart", name, self.path)
        try:
            changed = self.broker.reload_properties(props)
        except ConfigError as exc:
            log.warning("SIGHUP: %s in %s; settings not reloaded", exc, self.path)
            return
        if not changed:
            log.info("SIGHUP: %s re-read, no dynamic setting changed", self.path)


def keep_static_settings(props: Mapping[str, Any], running: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Split a re-read file's settings from the ones that need a restart: those (the
    static settings whose value differs from ``running``, the settings given at start)
    get their running value back and are named, sorted."""
    names = set(props) | set(running)
    restart_only = sorted(name for name in names
                          if not _is_dynamic(name) and props.get(name) != running.get(name))
    kept = {name: value for name, value in props.items() if name not in restart_only}
    kept.update({name: running[name] for name in restart_only if name in running})
    return kept, restart_only


def _is_dynamic(name: str) -> bool:
    key = BROKER_KEYS.get(name)  # listener.name.* settings are per listener: static
    return key is not None and key.dynamic


def _listeners_text(broker: Broker) -> str:
    return ", ".join(f"{name}://{host}:{port}" for name, (host, port) in broker.bound.items())


async def _ping_watchdog(interval_s: float) -> None:
    """WATCHDOG=1 from the event loop itself: a loop stuck for longer than the unit's
    WatchdogSec= misses its pings, and systemd restarts the broker."""
    while True:
        notify("WATCHDOG=1")
        await asyncio.sleep(interval_s)


async def _serve(config: BrokerConfig, args: argparse.Namespace) -> int:
    watchdog_s = watchdog_interval_s()
    watchdog = asyncio.create_task(_ping_watchdog(watchdog_s)) if watchdog_s else None
    try:
        return await _run_broker(config, args)
    finally:
        if watchdog is not None:
            watchdog.cancel()


async def _run_broker(config: BrokerConfig, args: argparse.Namespace) -> int:
    _before, open_files = raise_open_files_limit()
    size_sealed_segment_lru(open_files if open_files != resource.RLIM_INFINITY else 1 << 20,
                            max_map_count())
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    broker = Broker(config)
    reloader = _Reloader(broker, args.config, args.override)
    loop.add_signal_handler(signal.SIGHUP, reloader.on_signal)
    notify("STATUS=starting: opening logs, joining the cluster")
    try:
        await broker.start()
    except Exception as exc:  # port in use, unreadable log dir, bad metadata file...
        log.error("cannot start: %s", exc, exc_info=log.isEnabledFor(logging.DEBUG))
        notify(f"STATUS=cannot start: {exc}")
        await broker.stop()
        return 1
    if args.ready_file:
        _write_ready_file(args.ready_file, broker)
    # start() returns once every listener serves: registered, a controller known.
    notify("READY=1", f"STATUS=serving on {_listeners_text(broker)}")
    reloader.now_serving()
    await stop.wait()
    notify("STOPPING=1", "STATUS=shutting down")
    await broker.stop()
    return 0


def _installed_script() -> str | None:
    """This installation's pykfk-broker console script, for the unit's ExecStart."""
    script = os.path.join(sysconfig.get_path("scripts"), "pykfk-broker")
    return script if os.path.isfile(script) else shutil.which("pykfk-broker")


# What the shipped unit's sandbox hides from the service (systemd.exec): PrivateTmp=yes
# gives it empty /tmp and /var/tmp, ProtectHome=yes empty /home, /root and /run/user.
_HIDDEN_BY_UNIT = (("/tmp", "PrivateTmp=yes"), ("/var/tmp", "PrivateTmp=yes"),
                   ("/home", "ProtectHome=yes"), ("/root", "ProtectHome=yes"),
                   ("/run/user", "ProtectHome=yes"))


def hidden_from_unit(executable: str) -> str | None:
    """Why the unit's ExecStart cannot run ``executable``, or None when it can."""
    for path in dict.fromkeys([os.path.abspath(executable), os.path.realpath(executable)]):
        for root, setting in _HIDDEN_BY_UNIT:
            if path == root or path.startswith(root + "/"):
                return (f"ExecStart runs {executable}, under {root}, which the unit's "
                        f"{setting} hides from the service: it would fail with status 203/EXEC. "
                        "Install pykfk where the service can see it (python3 -m venv /opt/pykfk; "
                        f"docs/service.md), or remove {setting} from the unit.")
    return None


def _refuse(log_format: str, message: str) -> int:
    """A start refused before serving: a JSON log line in JSON mode, else plain text."""
    if log_format == "json":
        log.error("%s", message)
    else:
        print(f"pykfk-broker: {message}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point; returns the process exit status."""
    args = _parse_args(argv)
    if args.print_systemd_unit:
        script = _installed_script()
        sys.stdout.write(unit_file_text(script))
        if script is not None:
            warning = hidden_from_unit(script)
            if warning:
                print(f"pykfk-broker: warning: {warning}", file=sys.stderr)
        return 0
    if args.print_example_config:
        sys.stdout.write(example_config_text())
        return 0
    configure_logging(args.log_level, args.log_format)
    try:
        config = BrokerConfig.load(args.config, args.override)
    except ConfigError as exc:
        return _refuse(args.log_format, f"invalid configuration: {exc}")
    except OSError as exc:
        return _refuse(args.log_format, f"cannot read {args.config}: {exc.strerror or exc}")
    for key in config.ignored_keys_set():
        log.info("%s is accepted for compatibility and has no effect", key)
    try:
        import uvloop
    except ImportError:
        return asyncio.run(_serve(config, args))
    if not hasattr(asyncio, "Runner"):  # Python 3.10
        uvloop.install()
        return asyncio.run(_serve(config, args))
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        code: int = runner.run(_serve(config, args))
        return code


if __name__ == "__main__":
    sys.exit(main())
