"""Exactly-once copying: records and the progress that vouches for them committed in one
transaction of the target (KIP-98), as MirrorMaker 2's exactly-once source tasks keep
their offsets in the target (KIP-618).

Partitions move between the processes of a mirror (a consumer group in the source),
while transactions live in the target, where the source group's generation cannot fence
anyone (KIP-447 needs both in one cluster). So the unit of fencing is the source
partition: each gets its own transactional producer with a stable id,
``<transactional.id.prefix>-<topic>-<partition>``. A process that is given a partition
first initializes that id, which fences whichever process held it before (dead or
merely paused) and aborts the transaction it left open; only then does it read the
partition's progress, which can no longer change behind its back.

A transaction that fails for a reason other than a fence (the target restarted and lost
its state, the coordinator aborted it after transaction.timeout.ms) is aborted, or its
producer replaced: TransactionAborted tells the mirror to copy the partition again from
its committed progress. A target that does not answer is TargetUnavailable: the call is
made again later.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException, Producer

from pykfk.mirror.errors import MirrorError
from pykfk.mirror.health import TargetUnavailable, flush_while_answered, unreachable

__all__ = ["PartitionTransactions", "TransactionAborted"]

log = logging.getLogger("pykfk.mirror")

SourcePartition = tuple[str, int]
T = TypeVar("T")

# Longest one transactional call (init, flush, commit, abort) may take, in seconds: the
# same bound as the at-least-once flush.
TRANSACTION_CALL_TIMEOUT_S = 60
# An abort on the way out is a courtesy (the next owner's init aborts it anyway).
ABORT_ON_CLOSE_TIMEOUT_S = 10


def _error_of(exc: KafkaException) -> KafkaError | None:
    error = exc.args[0] if exc.args else None
    return error if isinstance(error, KafkaError) else None


def _describe(exc: KafkaException) -> str:
    error = _error_of(exc)
    return f"{error.name()}: {error.str()}" if error is not None else str(exc)


# What a newer holder of the transactional id does to a producer, as librdkafka reports
# it: its own fatal error, or the broker's (KIP-588 PRODUCER_FENCED, or the older
# INVALID_PRODUCER_EPOCH).
_FENCED_CODES = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})


class TransactionAborted(Exception):
    """The partition's open transaction is gone (aborted, or its producer failed and was
    dropped): its records are not in the target; copy them again."""


class PartitionTransactions:
    """The transactional producers of the source partitions one process copies.

    ``open`` before copying a partition, ``producer`` for each record (it begins a
    transaction when none is open), ``commit`` once the partition's progress was queued
    on the same producer, ``release`` when the partition goes. Any failure raises
    MirrorError: the open transactions stay uncommitted (invisible to read_committed
    consumers) and the next owner resumes at the last committed progress. Not
    thread-safe: the mirror's loop thread only.
    """

    def __init__(self, producer_config: dict[str, Any], id_prefix: str):
        self.producer_config = producer_config
        self.id_prefix = id_prefix
        self._producers: dict[SourcePartition, Producer] = {}
        self._settings: dict[SourcePartition, dict[str, Any] | None] = {}
        self._open: set[SourcePartition] = set()
        # The fatal error each failed producer raised (once; later calls say _FATAL).
        self._fatal: dict[SourcePartition, KafkaError] = {}
        self.committed = 0  # transactions committed, for the metrics

    def transactional_id(self, partition: SourcePartition) -> str:
        return f"{self.id_prefix}-{partition[0]}-{partition[1]}"

    def open(self, partition: SourcePartition, settings: dict[str, Any] | None = None) -> None:
        """Make the partition's producer (``settings`` over the common ones) and fence
        its previous holder."""
        if partition in self._producers:
            return
        self._settings[partition] = settings
        producer = Producer({**self.producer_config, **(settings or {}),
                             "transactional.id": self.transactional_id(partition)})
        try:
            producer.init_transactions(TRANSACTION_CALL_TIMEOUT_S)
        except KafkaException as exc:
            if unreachable(exc):
                raise TargetUnavailable(f"initializing {self.transactional_id(partition)}: {_describe(exc)}") from None
            raise MirrorError(
                f"the target refused transactional id {self.transactional_id(partition)!r} "
                f"({_describe(exc)}); for a target without transactions set exactly.once=false"
            ) from exc
        self._producers[partition] = producer

    def producer(self, partition: SourcePartition) -> Producer:
        """The partition's producer, inside a transaction (a new producer when the last
        one failed; TargetUnavailable while the target cannot make it)."""
        if partition not in self._producers:
            self.open(partition, self._settings.get(partition))
        producer = self._producers[partition]
        if partition not in self._open:
            self._call(partition, producer.begin_transaction)
            self._open.add(partition)
        return producer

    def has_open(self, partition: SourcePartition) -> bool:
        return partition in self._open

    def flush(self, partitions: list[SourcePartition], slice_s: float = TRANSACTION_CALL_TIMEOUT_S) -> None:
        """Wait until the target acknowledged everything sent for ``partitions``, as long
        as it acknowledges some every ``slice_s`` (at most TRANSACTION_CALL_TIMEOUT_S)."""
        for partition in partitions:
            remaining = self._settle(partition, partial(flush_while_answered, self._producers[partition], slice_s,
                                                        TRANSACTION_CALL_TIMEOUT_S))
            if remaining:
                raise TargetUnavailable(f"{remaining} records of {partition[0]}[{partition[1]}] not acknowledged")

    def commit(self, partition: SourcePartition, timeout_s: float = TRANSACTION_CALL_TIMEOUT_S) -> None:
        """Commit the partition's transaction; after TargetUnavailable call again (the
        commit may have happened: librdkafka finds out)."""
        producer = self._producers[partition]
        self._settle(partition, lambda: producer.commit_transaction(timeout_s))
        self._open.discard(partition)
        self.committed += 1

    def poll(self) -> None:
        """Serve the producers' callbacks (librdkafka queues them until polled)."""
        for partition, producer in self._producers.items():
            self._call(partition, partial(producer.poll, 0))

    def release(self, partition: SourcePartition) -> None:
        """Drop a partition given up after its progress was committed."""
        self._settings.pop(partition, None)
        producer = self._producers.pop(partition, None)
        if producer is not None and partition in self._open:
            self._abort(partition, producer)
        self._open.discard(partition)
        self._fatal.pop(partition, None)

    def close(self) -> None:
        for partition in list(self._producers):
            self.release(partition)

    def _abort(self, partition: SourcePartition, producer: Producer) -> bool:
        try:
            producer.abort_transaction(ABORT_ON_CLOSE_TIMEOUT_S)
            return True
        except KafkaException as exc:
            log.warning("aborting the transaction of %s[%d]: %s", partition[0], partition[1], _describe(exc))
            return False

    def _settle(self, partition: SourcePartition, call: Callable[[], T]) -> T:
        """``call()`` on the partition's producer at a commit point: a fence or another
        refusal is MirrorError, a target not answering TargetUnavailable, anything else
        ends the transaction (TransactionAborted)."""
        try:
            return call()
        except KafkaException as exc:
            error = _error_of(exc)
            failure = self.failure(partition, exc)
            real = self._fatal.get(partition) or error
            if error is None or (real is not None and real.code() in _FENCED_CODES):
                raise failure from exc
            if error.fatal() or error.code() == KafkaError._FATAL:
                # A new producer (same transactional id) aborts what this one left open.
                self._producers.pop(partition, None)
                self._open.discard(partition)
                self._fatal.pop(partition, None)
                raise TransactionAborted(str(failure)) from None
            if error.txn_requires_abort():
                if not self._abort(partition, self._producers[partition]):
                    self._producers.pop(partition, None)  # the next one's init aborts it
                self._open.discard(partition)
                raise TransactionAborted(str(failure)) from None
            if unreachable(exc):
                raise TargetUnavailable(_describe(exc)) from None
            raise failure from exc

    def _call(self, partition: SourcePartition, call: Callable[[], T]) -> T:
        try:
            return call()
        except KafkaException as exc:
            raise self.failure(partition, exc) from exc

    def failure(self, partition: SourcePartition, exc: KafkaException) -> MirrorError:
        """The MirrorError for ``exc``, raised by a call on the partition's producer."""
        error = _error_of(exc)
        if error is not None and error.code() == KafkaError._FATAL:
            # A failed producer answers every call _FATAL; the error itself is raised
            # once, by whichever call serves it (poll, flush), maybe none yet.
            error = self._fatal.get(partition) or self._serve_fatal_error(partition) or error
        elif error is not None and error.fatal():
            self._fatal[partition] = error
        text = f"{error.name()}: {error.str()}" if error is not None else str(exc)
        what = ("another process took it over (fenced)" if error is not None and error.code() in _FENCED_CODES
                else "the transaction failed and was not committed")
        return MirrorError(f"{partition[0]}[{partition[1]}]: {what}: {text}")

    def _serve_fatal_error(self, partition: SourcePartition) -> KafkaError | None:
        producer = self._producers.get(partition)
        try:
            if producer is not None:
                producer.poll(0)
        except KafkaException as exc:
            error = _error_of(exc)
            if error is not None:
                self._fatal[partition] = error
            return error
        return None
