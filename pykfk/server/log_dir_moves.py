"""Moves of partition logs between this broker's log dirs (AlterReplicaLogDirs), as
Kafka makes them with a future log: the files are copied to ``<dir>/<topic>-<partition>
.<id>-future`` by a worker thread while the partition keeps taking appends, copied again
until little is left, then swapped in one step on the event loop (the last appends
copied, the dirs renamed, the replica restarted on the moved log: waiting acks=all
produce requests get NOT_LEADER_OR_FOLLOWER and are retried by their clients).
DescribeLogDirs shows a move in progress as the future replica in the target dir.
A stop during a move leaves the log where it was and its future dir in the target dir,
as Kafka's does: the broker resumes the move when it starts again (``resume_moves``),
copying on from what the future dir holds; a future dir whose partition is gone, whose
log is in the target dir already, or whose target dir cannot take it is removed.
``replica.alter.log.dirs.io.max.bytes.per.second`` (a dynamic broker setting, as in
Kafka) caps the bytes per second the copy passes read and write; the swap's last copy
is never held back."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

from pykfk.clock import SYSTEM_CLOCK
from pykfk.errors import ErrorCode, KafkaError
from pykfk.server.services import BrokerServices

logger = logging.getLogger(__name__)

# Copy again while a pass copied more than this; then swap.
CATCH_UP_BYTES = 4 << 20
MAX_PASSES = 5
RATE_KEY = "replica.alter.log.dirs.io.max.bytes.per.second"
UNLIMITED = 2**63 - 1


@dataclass
class Move:
    log_dir: str
    future: str
    copied_offset: int  # the log end offset when the last copy pass started
    task: asyncio.Task[None] | None = None
    stopped: threading.Event = field(default_factory=threading.Event)  # the copy thread gives up


class _MoveStopped(Exception):
    """The broker stops: a throttled copy pass ends where it is."""


class _Pace:
    """Holds a copy pass (in its worker thread) to the rate ``rate()`` gives, read at
    every MiB so a changed setting applies at once."""

    def __init__(self, rate: Callable[[], int], stopped: threading.Event):
        self._rate = rate
        self._stopped = stopped
        self._start = SYSTEM_CLOCK.monotonic()
        self._bytes = 0

    def __call__(self, size: int) -> None:
        if self._stopped.is_set():
            raise _MoveStopped()
        self._bytes += size
        rate = self._rate()
        if rate >= UNLIMITED:
            return
        ahead = self._bytes / rate - (SYSTEM_CLOCK.monotonic() - self._start)
        if ahead > 0 and self._stopped.wait(ahead):
            raise _MoveStopped()


_MOVES: weakref.WeakKeyDictionary[object, dict[tuple[str, int], Move]] = weakref.WeakKeyDictionary()


def moves_of(broker: object) -> dict[tuple[str, int], Move]:
    found = _MOVES.get(broker)
    if found is None:
        found = _MOVES[broker] = {}
    return found


def future_size(move: Move) -> int:
    try:
        return sum(entry.stat().st_size for entry in os.scandir(move.future) if entry.is_file())
    except OSError:
        return 0


def start_move(broker: BrokerServices, topic: str, partition: int, log_dir: str) -> ErrorCode:
    """Starts moving the partition's log to ``log_dir`` (NONE when it is there or on
    its way already); the error code otherwise, as Kafka's."""
    manager = broker.replica_manager.log_manager
    log_dir = os.path.abspath(log_dir)
    if broker.metadata.get_topic(topic) is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    problem = manager.move_problem(topic, partition, log_dir)
    if problem is not None:
        return ErrorCode(problem[0])
    log = manager.get_log(topic, partition)
    assert log is not None
    moves = moves_of(broker)
    current = moves.get((topic, partition))
    if os.path.dirname(log.dir) == log_dir or (current is not None and current.log_dir == log_dir):
        return ErrorCode.NONE
    if current is not None:
        return ErrorCode.REPLICA_NOT_AVAILABLE  # moving elsewhere: asked again once it is done
    _begin(broker, topic, partition, Move(log_dir, manager.future_dir(log, log_dir), log.log_end_offset))
    return ErrorCode.NONE


def resume_moves(broker: BrokerServices) -> int:
    """Resumes the moves the last stop interrupted (their future dirs found at start);
    returns how many."""
    manager = broker.replica_manager.log_manager
    resumed = 0
    for (topic, partition), future in sorted(manager.take_interrupted_moves().items()):
        log_dir = os.path.dirname(future)
        log = manager.get_log(topic, partition)
        problem = manager.move_problem(topic, partition, log_dir)
        if broker.metadata.get_topic(topic) is None or log is None or problem is not None \
                or os.path.dirname(log.dir) == log_dir:
            logger.info("Removing %s: the move of %s-%d cannot go on (%s)", future, topic, partition,
                        problem[1] if problem is not None else "no log to move, or moved already")
            shutil.rmtree(future, ignore_errors=True)
            continue
        logger.info("Resuming the move of %s-%d to %s", topic, partition, log_dir)
        _begin(broker, topic, partition, Move(log_dir, future, log.log_start_offset))
        resumed += 1
    return resumed


async def stop_moves(broker: object) -> None:
    """The broker stops: copies end where they are, their future dirs stay for the next
    start to resume."""
    moves = list(moves_of(broker).values())
    for move in moves:
        move.stopped.set()
        if move.task is not None:
            move.task.cancel()
    await asyncio.gather(*(m.task for m in moves if m.task is not None), return_exceptions=True)


def _begin(broker: BrokerServices, topic: str, partition: int, move: Move) -> None:
    moves_of(broker)[(topic, partition)] = move
    move.task = asyncio.get_running_loop().create_task(_run(broker, topic, partition, move))


async def _run(broker: BrokerServices, topic: str, partition: int, move: Move) -> None:
    manager = broker.replica_manager.log_manager
    loop = asyncio.get_running_loop()
    pace = _Pace(lambda: int(broker.config[RATE_KEY]), move.stopped)
    try:
        for _ in range(MAX_PASSES):
            log = manager.get_log(topic, partition)
            if log is None:
                raise KafkaError(ErrorCode.REPLICA_NOT_AVAILABLE, "the log went away")
            move.copied_offset = log.log_end_offset
            try:
                copied = await loop.run_in_executor(None, manager.copy_for_move, log, move.future, pace)
            except asyncio.CancelledError:
                move.stopped.set()  # the broker stops: the future dir stays, resumed at the next start
                raise
            if copied <= CATCH_UP_BYTES:
                break
        log = manager.get_log(topic, partition)
        if log is None:
            raise KafkaError(ErrorCode.REPLICA_NOT_AVAILABLE, "the log went away")
        replicas = broker.replica_manager
        replicas.remove_partition(topic, partition, delete=False)
        try:
            manager.finish_move(log, move.future)
        finally:
            replicas.apply_state(topic, partition)
    except (OSError, KafkaError) as exc:
        logger.warning("Moving %s-%d to %s failed, it stays where it was: %s", topic, partition, move.log_dir, exc)
        shutil.rmtree(move.future, ignore_errors=True)
    finally:
        moves_of(broker).pop((topic, partition), None)
