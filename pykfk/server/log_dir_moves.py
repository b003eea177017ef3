"""Moves of partition logs between this broker's log dirs (AlterReplicaLogDirs), as
Kafka makes them with a future log: the files are copied to ``<dir>/<topic>-<partition>
.<id>-future`` by a worker thread while the partition keeps taking appends, copied again
until little is left, then swapped in one step on the event loop (the last appends
copied, the dirs renamed, the replica restarted on the moved log: waiting acks=all
produce requests get NOT_LEADER_OR_FOLLOWER and are retried by their clients).
DescribeLogDirs shows a move in progress as the future replica in the target dir.
A stop during a move leaves the log where it was (the future dir is removed at start)."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import weakref
from dataclasses import dataclass

from pykfk.errors import ErrorCode, KafkaError
from pykfk.server.services import BrokerServices

logger = logging.getLogger(__name__)

# Copy again while a pass copied more than this; then swap.
CATCH_UP_BYTES = 4 << 20
MAX_PASSES = 5


@dataclass
class Move:
    log_dir: str
    future: str
    copied_offset: int  # the log end offset when the last copy pass started
    task: asyncio.Task[None] | None = None


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
    move = Move(log_dir, manager.future_dir(log, log_dir), log.log_end_offset)
    moves[(topic, partition)] = move
    move.task = asyncio.get_running_loop().create_task(_run(broker, topic, partition, move))
    return ErrorCode.NONE


async def _run(broker: BrokerServices, topic: str, partition: int, move: Move) -> None:
    manager = broker.replica_manager.log_manager
    loop = asyncio.get_running_loop()
    try:
        for _ in range(MAX_PASSES):
            log = manager.get_log(topic, partition)
            if log is None:
                raise KafkaError(ErrorCode.REPLICA_NOT_AVAILABLE, "the log went away")
            move.copied_offset = log.log_end_offset
            copied = await loop.run_in_executor(None, manager.copy_for_move, log, move.future)
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
