"""``pykfk-broker [server.properties] [--override key=value ...]``: run one broker.

Standalone with embedded metadata (no ZooKeeper) by default, on 127.0.0.1:9092 with its
data under ``./data``; with ``zookeeper.connect`` set, a member of a cluster coordinated
through ZooKeeper, and SIGTERM first moves its partition leaderships to other brokers
(controlled shutdown). SIGTERM or SIGINT stop it cleanly: stop accepting, answer requests
already read, flush, write checkpoints, exit 0 (the next start then skips the recovery
scan).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import resource
import signal
import sys
from collections.abc import Sequence

from pykfk._core.segment import set_open_sealed_segments_limit
from pykfk.broker import Broker
from pykfk.config import BrokerConfig, ConfigError

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
        "--ready-file",
        help="once accepting connections, write {host, port, pid} as JSON to this file",
    )
    return parser.parse_args(argv)


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


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


def size_sealed_segment_lru(open_files_limit: int) -> int:
    """Sealed segments whose .log stays open between uses: an eighth of the open-files
    limit (between 64 and 4,096), the rest left to active segments and connections."""
    limit = min(max(open_files_limit // 8, 64), 4096)
    set_open_sealed_segments_limit(limit)
    return limit


async def _serve(config: BrokerConfig, ready_file: str | None) -> int:
    _before, open_files = raise_open_files_limit()
    size_sealed_segment_lru(open_files if open_files != resource.RLIM_INFINITY else 1 << 20)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    broker = Broker(config)
    try:
        await broker.start()
    except Exception as exc:  # port in use, unreadable log dir, bad metadata file...
        log.error("cannot start: %s", exc, exc_info=log.isEnabledFor(logging.DEBUG))
        await broker.stop()
        return 1
    if ready_file:
        _write_ready_file(ready_file, broker)
    await stop.wait()
    await broker.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point; returns the process exit status."""
    args = _parse_args(argv)
    _setup_logging(args.log_level)
    try:
        config = BrokerConfig.load(args.config, args.override)
    except ConfigError as exc:
        print(f"pykfk-broker: invalid configuration: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"pykfk-broker: cannot read {args.config}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    for key in config.ignored_keys_set():
        log.info("%s is accepted for compatibility and has no effect", key)
    try:
        import uvloop
    except ImportError:
        return asyncio.run(_serve(config, args.ready_file))
    if not hasattr(asyncio, "Runner"):  # Python 3.10
        uvloop.install()
        return asyncio.run(_serve(config, args.ready_file))
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_serve(config, args.ready_file))


if __name__ == "__main__":
    sys.exit(main())
