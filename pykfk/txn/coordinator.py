"""The transaction coordinator (KIP-98 with the KIP-360 and KIP-588 epoch rules; after
apache/kafka's ``TransactionCoordinator`` and ``TransactionStateManager``).

Each transactional id belongs to one partition of ``__transaction_state`` (Java
``String.hashCode`` of the id, as groups map to ``__consumer_offsets``); the broker
leading that partition coordinates it. Every state change is written to that partition
(acks=all) before it takes effect, so a new leader replays the partition and carries on:
transactions it finds preparing a commit or an abort get their markers written again.

States (``TxnState``) and who moves them::

    Empty/CompleteCommit/CompleteAbort --AddPartitionsToTxn/AddOffsetsToTxn--> Ongoing
    Ongoing --EndTxn(commit)--> PrepareCommit --markers written--> CompleteCommit
    (transaction version 2, EndTxn v5: PrepareCommit/PrepareAbort at epoch + 1, the
    markers at that epoch; an abort with no transaction open bumps the epoch too)
    Ongoing --EndTxn(abort), timeout, InitProducerId of a new producer
            (PrepareEpochFence, epoch + 1)--> PrepareAbort --markers--> CompleteAbort
    any settled state --transactional.id.expiration.ms--> Dead (tombstone)

A request that finds markers being written waits for them (up to ``COMPLETION_WAIT_S``)
and answers CONCURRENT_TRANSACTIONS only when they take longer; the client retries. One
transactional id is changed by one request at a time (a lock per id).
Loop-affine; every timer and timestamp comes from the injected clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping
from typing import Any, Protocol

from pykfk.clock import SYSTEM_CLOCK, Clock
from pykfk.errors import ErrorCode, KafkaError
from pykfk.group.offsets import partition_for
from pykfk.txn.records import (
    TRANSACTION_STATE_TOPIC,
    TxnRecord,
    TxnRecordError,
    TxnState,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

log = logging.getLogger("pykfk.txn")
E = ErrorCode

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
# Kafka bumps to a new producer id when the epoch would pass Short.MAX_VALUE - 1.
MAX_PRODUCER_EPOCH = 32767
# Marker writes that failed are retried after this long, doubling up to the maximum.
MARKER_RETRY_BACKOFF_S = 0.05
MARKER_RETRY_BACKOFF_MAX_S = 1.0

# A request that finds the id's last transaction still writing its markers waits this
# long for them before it answers CONCURRENT_TRANSACTIONS, which the client would retry
# only after its backoff (librdkafka: retry.backoff.ms, 100 ms): on one broker the
# markers take well under a millisecond, so a producer's next AddPartitionsToTxn
# arriving meanwhile is answered as soon as they are written, not bounced.
COMPLETION_WAIT_S = 0.5

# Transactional ids whose partition is remembered (the cache starts again when full).
PARTITION_CACHE_SIZE = 100_000

TopicPartition = tuple[str, int]
SETTLED = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})
PREPARING = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.PREPARE_EPOCH_FENCE})
ENDING_V2 = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.COMPLETE_COMMIT,
                       TxnState.COMPLETE_ABORT})


@dataclasses.dataclass(frozen=True)
class TxnConfig:
    """Kafka's transaction settings (``pykfk.config`` has their names and defaults)."""

    num_partitions: int = 50
    max_timeout_ms: int = 900000
    id_expiration_ms: int = 604800000
    abort_check_interval_ms: int = 10000
    expiration_check_interval_ms: int = 3600000
    # How long a state write or a marker may wait for the in-sync replicas.
    write_timeout_ms: int = 5000

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> TxnConfig:
        return cls(
            num_partitions=int(props["transaction.state.log.num.partitions"]),
            max_timeout_ms=int(props["transaction.max.timeout.ms"]),
            id_expiration_ms=int(props["transactional.id.expiration.ms"]),
            abort_check_interval_ms=int(props["transaction.abort.timed.out.transaction.cleanup.interval.ms"]),
            expiration_check_interval_ms=int(props["transaction.remove.expired.transaction.cleanup.interval.ms"]),
            write_timeout_ms=int(props["offsets.commit.timeout.ms"]),
        )


class StateLog(Protocol):
    """One ``__transaction_state`` partition as the coordinator sees it: ``append``
    returns once the records are durable (replicated) or raises; ``read_all`` yields
    every (key, value) from the start (None = tombstone)."""

    async def append(self, records: list[tuple[bytes, bytes | None]]) -> None: ...

    def read_all(self) -> Iterator[tuple[bytes, bytes | None]]: ...


class MarkerWriter(Protocol):
    """Writes COMMIT/ABORT markers to partition leaders; an error code per partition."""

    async def write(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                    partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]: ...


class TxnMetadata:
    """What the coordinator knows of one transactional id."""

    __slots__ = ("_key", "client_transaction_version", "completion", "last_producer_epoch", "lock", "next_producer_id",
                 "partition", "partitions", "pending", "previous_producer_id", "producer_epoch", "producer_id",
                 "start_ms", "state", "timeout_ms", "transactional_id", "update_ms")

    def __init__(self, transactional_id: str, partition: int, record: TxnRecord):
        self.transactional_id = transactional_id
        self._key: bytes | None = None
        self.partition = partition
        self.producer_id = record.producer_id
        self.producer_epoch = record.producer_epoch
        # The epoch before the last bump: an InitProducerId retried with it gets the
        # current one back instead of a second bump (KIP-360).
        self.last_producer_epoch = NO_PRODUCER_EPOCH
        self.timeout_ms = record.transaction_timeout_ms
        self.state = record.state
        self.partitions: set[TopicPartition] = set(record.partitions)
        self.start_ms = record.start_timestamp_ms
        self.update_ms = record.last_update_timestamp_ms
        self.lock = asyncio.Lock()
        self.completion: asyncio.Task[None] | None = None
        # A state whose write failed without a definite answer (no quorum, a timeout):
        # written again until it is durable, requests answered CONCURRENT_TRANSACTIONS
        # meanwhile (Kafka keeps such a transition pending too).
        self.pending: TxnRecord | None = None
        # Transaction version 2 when the epoch is exhausted: the transaction ends at the
        # last epoch, then the id continues with this producer id at epoch 0; the
        # producer id before the last change answers a retried EndTxn (Kafka's
        # NextProducerId/PreviousProducerId). Both are stored, so a reload goes on.
        self.next_producer_id = record.next_producer_id
        self.previous_producer_id = record.previous_producer_id
        self.client_transaction_version = record.client_transaction_version
        if (record.client_transaction_version >= 2 and record.producer_epoch > 0
                and record.state in ENDING_V2):
            # Ended at epoch + 1 (EndTxn v5): a retry names the epoch before (the
            # in-memory epoch before the bump is not stored).
            self.last_producer_epoch = record.producer_epoch - 1

    def record(self, **changes: Any) -> TxnRecord:
        """The stored form of this metadata with ``changes`` applied (not yet taken)."""
        fields: dict[str, Any] = {"producer_id": self.producer_id, "producer_epoch": self.producer_epoch,
                                  "transaction_timeout_ms": self.timeout_ms, "state": self.state,
                                  "last_update_timestamp_ms": self.update_ms, "start_timestamp_ms": self.start_ms,
                                  "previous_producer_id": self.producer_id,
                                  "next_producer_id": self.next_producer_id,
                                  "client_transaction_version": self.client_transaction_version}
        fields.update(changes)
        if "partitions" not in fields:
            fields["partitions"] = frozenset(self.partitions)
        return TxnRecord(**fields)

    @property
    def key(self) -> bytes:
        """The id's key in ``__transaction_state`` (encoded once)."""
        key = self._key
        if key is None:
            key = self._key = encode_key(self.transactional_id)
        return key

    def take(self, record: TxnRecord) -> None:
        """Applies a record once it is written."""
        if record.producer_id != self.producer_id or record.producer_epoch != self.producer_epoch:
            self.last_producer_epoch = self.producer_epoch if record.producer_id == self.producer_id \
                else NO_PRODUCER_EPOCH
        self.producer_id = record.producer_id
        self.producer_epoch = record.producer_epoch
        self.timeout_ms = record.transaction_timeout_ms
        self.state = record.state
        self.partitions = set(record.partitions)
        self.update_ms = record.last_update_timestamp_ms
        self.start_ms = record.start_timestamp_ms
        self.previous_producer_id = record.previous_producer_id
        self.next_producer_id = record.next_producer_id
        self.client_transaction_version = record.client_transaction_version


@dataclasses.dataclass
class _Loaded:
    storage: StateLog
    coordinator_epoch: int


def _storage_error(exc: BaseException) -> ErrorCode:
    """A failed state write as Kafka answers it: the client looks for the coordinator
    again, or retries."""
    if isinstance(exc, KafkaError) and exc.code in (E.NOT_COORDINATOR, E.NOT_LEADER_OR_FOLLOWER):
        return E.NOT_COORDINATOR
    return E.COORDINATOR_NOT_AVAILABLE


class TransactionCoordinator:
    """One per broker. ``start`` binds it to the loop and starts the timeout checks;
    partitions of ``__transaction_state`` are loaded and unloaded as leadership moves."""

    def __init__(self, config: TxnConfig, *, allocate_producer_id: Callable[[], Awaitable[int]],
                 markers: MarkerWriter, clock: Clock = SYSTEM_CLOCK):
        self.config = config
        self.allocate_producer_id = allocate_producer_id
        self.markers = markers
        self.clock = clock
        self.txns: dict[str, TxnMetadata] = {}
        self._loaded: dict[int, _Loaded] = {}
        self._loading: set[int] = set()
        self._partition_of: dict[str, int] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stopped = False

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        self._spawn(self._periodic(self.config.abort_check_interval_ms, self.abort_timed_out))
        self._spawn(self._periodic(self.config.expiration_check_interval_ms, self.expire_transactional_ids))

    async def shutdown(self) -> None:
        self._stopped = True
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _periodic(self, interval_ms: int, step: Callable[[], Awaitable[Any]]) -> None:
        while not self._stopped:
            await self.clock.sleep(interval_ms / 1000)
            try:
                await step()
            except Exception:
                log.exception("transaction coordinator: periodic %s failed", getattr(step, "__name__", step))

    # -- partitions -------------------------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        # Every request asks this, several times; the hash is a Python loop over the id.
        partition = self._partition_of.get(transactional_id)
        if partition is None:
            if len(self._partition_of) >= PARTITION_CACHE_SIZE:
                self._partition_of.clear()
            partition = self._partition_of[transactional_id] = partition_for(
                transactional_id, self.config.num_partitions)
        return partition

    @property
    def owned_partitions(self) -> frozenset[int]:
        return frozenset(self._loaded)

    async def load_partition(self, partition: int, storage: StateLog, coordinator_epoch: int) -> None:
        """Replays the partition (this broker became its leader) and resumes the
        transactions it finds half-way through ending."""
        self._loading.add(partition)
        try:
            latest: dict[str, TxnRecord | None] = {}
            for key, value in storage.read_all():
                try:
                    transactional_id = decode_key(key)
                    if transactional_id is not None:
                        latest[transactional_id] = None if value is None else decode_value(value)
                except TxnRecordError as exc:
                    log.warning("%s-%d: skipping a record that does not parse: %s",
                                TRANSACTION_STATE_TOPIC, partition, exc)
            for transactional_id, record in latest.items():
                if record is None or record.state == TxnState.DEAD:
                    self.txns.pop(transactional_id, None)
                else:
                    self.txns[transactional_id] = TxnMetadata(transactional_id, partition, record)
            self._loaded[partition] = _Loaded(storage, coordinator_epoch)
        finally:
            self._loading.discard(partition)
        resumed = 0
        for meta in self._txns_of(partition):
            if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                self._start_completion(meta, meta.state == TxnState.PREPARE_COMMIT)
                resumed += 1
        log.info("%s-%d loaded at coordinator epoch %d: %d transactional ids, %d transactions "
                 "resumed", TRANSACTION_STATE_TOPIC, partition, coordinator_epoch,
                 sum(1 for _ in self._txns_of(partition)), resumed)

    async def unload_partition(self, partition: int) -> None:
        self._loaded.pop(partition, None)
        for meta in list(self._txns_of(partition)):
            if meta.completion is not None:
                meta.completion.cancel()
            del self.txns[meta.transactional_id]

    def _txns_of(self, partition: int) -> Iterator[TxnMetadata]:
        return (m for m in list(self.txns.values()) if m.partition == partition)

    def _coordinator_error(self, transactional_id: str) -> ErrorCode | None:
        partition = self.partition_for(transactional_id)
        if partition in self._loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        if partition not in self._loaded:
            return E.NOT_COORDINATOR
        return None

    def is_coordinator(self, transactional_id: str) -> bool:
        return self._coordinator_error(transactional_id) is None

    async def _write(self, meta: TxnMetadata, record: TxnRecord | None) -> ErrorCode:
        """Stores ``record`` (None: a tombstone) and applies it once durable."""
        loaded = self._loaded.get(meta.partition)
        if loaded is None:
            return E.NOT_COORDINATOR
        value = None if record is None else encode_value(record)
        try:
            await loaded.storage.append([(meta.key, value)])
        except (KafkaError, OSError) as exc:
            error = _storage_error(exc)
            log.info("transactional id %s: state write failed: %s", meta.transactional_id, exc)
            if error == E.COORDINATOR_NOT_AVAILABLE and record is not None:
                # The record may be in the log already, or be refused only until the ISR
                # grows back: the client retries and must find this transition, not the
                # state before it (an abort of the transaction it opened, say).
                meta.pending = record
                self._spawn(self._write_pending(meta, loaded))
            return error
        if self._loaded.get(meta.partition) is not loaded:
            return E.NOT_COORDINATOR  # leadership moved while the write was waiting
        if record is not None:
            meta.take(record)
        return E.NONE

    async def _write_pending(self, meta: TxnMetadata, loaded: _Loaded) -> None:
        """Writes ``meta.pending`` again until it is durable, then applies it (and starts
        the markers of a commit or abort it prepares); gives up when this broker stops
        coordinating the id."""
        backoff = MARKER_RETRY_BACKOFF_S
        while not self._stopped:
            await self.clock.sleep(backoff)
            backoff = min(backoff * 2, MARKER_RETRY_BACKOFF_MAX_S)
            async with meta.lock:
                record = meta.pending
                if (record is None or self._loaded.get(meta.partition) is not loaded
                        or self.txns.get(meta.transactional_id) is not meta):
                    return
                try:
                    await loaded.storage.append([(meta.key, encode_value(record))])
                except (KafkaError, OSError) as exc:
                    if _storage_error(exc) != E.COORDINATOR_NOT_AVAILABLE:
                        return
                    continue
                if self._loaded.get(meta.partition) is not loaded:
                    return
                meta.pending = None
                meta.take(record)
                log.info("transactional id %s: state %s written after a retry", meta.transactional_id,
                         record.state.name)
                if record.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                    self._start_completion(meta, record.state == TxnState.PREPARE_COMMIT)
                return

    # -- InitProducerId ---------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, timeout_ms: int,
                               expected_producer_id: int = NO_PRODUCER_ID,
                               expected_epoch: int = NO_PRODUCER_EPOCH) -> tuple[ErrorCode, int, int]:
        """(error, producer id, epoch). A new id gets a fresh producer id at epoch 0; a
        known one an epoch bump, which fences its older producers; an open transaction
        is aborted first (CONCURRENT_TRANSACTIONS meanwhile: the client retries)."""
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return E.INVALID_TRANSACTION_TIMEOUT, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        error = self._coordinator_error(transactional_id)
        if error is not None:
            return error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        meta = self.txns.get(transactional_id)
        if meta is None:
            return await self._new_transactional_id(transactional_id, timeout_ms)
        await self._await_completion(meta)
        async with meta.lock:
            if self.txns.get(transactional_id) is not meta:
                return E.NOT_COORDINATOR, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
            if expected_producer_id != NO_PRODUCER_ID and not self._expected_producer(
                    meta, expected_producer_id, expected_epoch):
                return E.PRODUCER_FENCED, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
            if meta.state in PREPARING or meta.pending is not None:
                return E.CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
            if meta.state == TxnState.ONGOING:
                error = await self._abort_fencing(meta)
                return (error if error != E.NONE else E.CONCURRENT_TRANSACTIONS), NO_PRODUCER_ID, NO_PRODUCER_EPOCH
            if (expected_producer_id == meta.producer_id and expected_epoch != NO_PRODUCER_EPOCH
                    and expected_epoch == meta.last_producer_epoch and meta.state == TxnState.EMPTY):
                # A retry of the bump this producer already got: the same answer again.
                return E.NONE, meta.producer_id, meta.producer_epoch
            producer_id, epoch = meta.producer_id, meta.producer_epoch + 1
            if epoch >= MAX_PRODUCER_EPOCH:
                new_id = await self._new_producer_id()
                if new_id is None:
                    return E.COORDINATOR_LOAD_IN_PROGRESS, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
                producer_id, epoch = new_id, 0
            now = self.clock.time_ms()
            error = await self._write(meta, meta.record(
                producer_id=producer_id, producer_epoch=epoch, transaction_timeout_ms=timeout_ms,
                state=TxnState.EMPTY, partitions=frozenset(), last_update_timestamp_ms=now,
                start_timestamp_ms=-1))
            if error != E.NONE:
                return error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
            return E.NONE, meta.producer_id, meta.producer_epoch

    @staticmethod
    def _expected_producer(meta: TxnMetadata, producer_id: int, epoch: int) -> bool:
        """KIP-360: a producer asking to bump its own epoch must name the current one
        (or the one before the last bump, when it retries)."""
        if producer_id != meta.producer_id:
            return False
        return epoch in (meta.producer_epoch, meta.last_producer_epoch)

    async def _new_producer_id(self) -> int | None:
        """A producer id never handed out before; None while there is none to hand out
        (its block could not be saved), which InitProducerId answers as Kafka's brokers
        do then: COORDINATOR_LOAD_IN_PROGRESS, and the client retries."""
        try:
            return await self.allocate_producer_id()
        except KafkaError:
            return None

    async def _new_transactional_id(self, transactional_id: str, timeout_ms: int) -> tuple[ErrorCode, int, int]:
        producer_id = await self._new_producer_id()
        if producer_id is None:
            return E.COORDINATOR_LOAD_IN_PROGRESS, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        if transactional_id in self.txns:  # another request created it meanwhile
            return E.CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        now = self.clock.time_ms()
        record = TxnRecord(producer_id, 0, timeout_ms, TxnState.EMPTY, frozenset(), now, -1)
        meta = TxnMetadata(transactional_id, self.partition_for(transactional_id), record)
        self.txns[transactional_id] = meta
        async with meta.lock:
            error = await self._write(meta, record)
        if error != E.NONE:
            if self.txns.get(transactional_id) is meta:
                del self.txns[transactional_id]
            return error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        return E.NONE, producer_id, 0

    async def _abort_fencing(self, meta: TxnMetadata) -> ErrorCode:
        """Aborts the open transaction at epoch + 1 (Kafka's PrepareEpochFence), so the
        producer that opened it can write nothing more. Called holding ``meta.lock``."""
        meta.state = TxnState.PREPARE_EPOCH_FENCE
        error = await self._prepare_end(meta, commit=False, epoch=meta.producer_epoch + 1)
        if error != E.NONE:
            meta.state = TxnState.ONGOING
        return error

    # -- AddPartitionsToTxn / AddOffsetsToTxn ---------------------------------------------------

    def _producer_transaction(self, transactional_id: str, producer_id: int,
                              epoch: int) -> tuple[TxnMetadata | None, ErrorCode]:
        """The id's metadata when this coordinator owns it and the producer is its
        current one, else None and why not."""
        error = self._coordinator_error(transactional_id)
        if error is not None:
            return None, error
        meta = self.txns.get(transactional_id)
        error = self._producer_error(meta, producer_id, epoch)
        if error is not None or meta is None:
            return None, error or E.INVALID_PRODUCER_ID_MAPPING
        return meta, E.NONE

    def _producer_error(self, meta: TxnMetadata | None, producer_id: int, epoch: int) -> ErrorCode | None:
        if meta is not None and producer_id == meta.next_producer_id != NO_PRODUCER_ID:
            return E.CONCURRENT_TRANSACTIONS  # the next producer id, while the last transaction ends
        if meta is None or meta.producer_id != producer_id:
            return E.INVALID_PRODUCER_ID_MAPPING
        if epoch != meta.producer_epoch:
            return E.PRODUCER_FENCED
        return None

    async def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                             partitions: Iterable[TopicPartition]) -> ErrorCode:
        """Adds partitions to the producer's transaction (opening it)."""
        wanted = set(partitions)
        meta, refused = self._producer_transaction(transactional_id, producer_id, epoch)
        if meta is None:
            return refused
        await self._await_completion(meta)
        async with meta.lock:
            error = self._producer_error(meta, producer_id, epoch)  # again: the lock may have waited
            if error is not None:
                return error
            if meta.state in PREPARING or meta.pending is not None:
                return E.CONCURRENT_TRANSACTIONS
            if meta.state == TxnState.ONGOING and wanted <= meta.partitions:
                return E.NONE
            now = self.clock.time_ms()
            opening = meta.state != TxnState.ONGOING
            return await self._write(meta, meta.record(
                state=TxnState.ONGOING, partitions=frozenset(meta.partitions | wanted) if not opening else frozenset(wanted),
                last_update_timestamp_ms=now, start_timestamp_ms=now if opening else meta.start_ms))

    def verify_partition(self, transactional_id: str, producer_id: int, epoch: int,
                         partition: TopicPartition, *, abortable: bool = False) -> ErrorCode:
        """A transactional write to ``partition`` is part of the producer's open
        transaction (KIP-890's verification, for ids this broker coordinates): NONE, or
        why not. Ids coordinated elsewhere are not checked here (NONE).

        ``abortable``: the caller understands TRANSACTION_ABORTABLE (AddPartitionsToTxn
        v5): a partition outside the open transaction gets it instead of
        INVALID_TXN_STATE, and a transaction being committed or aborted
        CONCURRENT_TRANSACTIONS (Kafka's handleVerifyPartitionsInTransaction)."""
        if self._coordinator_error(transactional_id) is not None:
            return E.NONE
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return E.INVALID_PRODUCER_ID_MAPPING
        if epoch < meta.producer_epoch:
            return E.INVALID_PRODUCER_EPOCH
        if abortable and meta.state in PREPARING:
            return E.CONCURRENT_TRANSACTIONS
        in_transaction = meta.state == TxnState.ONGOING and partition in meta.partitions
        if meta.pending is not None and not in_transaction:
            # Its AddPartitionsToTxn may be the pending write: retriable either way.
            return E.CONCURRENT_TRANSACTIONS if abortable else E.NOT_ENOUGH_REPLICAS
        if not in_transaction:
            return E.TRANSACTION_ABORTABLE if abortable else E.INVALID_TXN_STATE
        return E.NONE

    # -- EndTxn ------------------------------------------------------------------------------

    async def end_transaction(self, transactional_id: str, producer_id: int, epoch: int,
                              commit: bool) -> ErrorCode:
        """Commits or aborts (EndTxn v0-4): PrepareCommit/PrepareAbort is written, the
        answer given, and the markers follow in the background."""
        meta, refused = self._producer_transaction(transactional_id, producer_id, epoch)
        if meta is None:
            return refused
        await self._await_completion(meta)
        async with meta.lock:
            error = self._producer_error(meta, producer_id, epoch)  # again: the lock may have waited
            if error is not None:
                return error
            if meta.pending is not None:
                return E.CONCURRENT_TRANSACTIONS
            state = meta.state
            if state == TxnState.ONGOING:
                return await self._prepare_end(meta, commit, epoch=meta.producer_epoch, client_transaction_version=0)
            if state == (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT):
                return E.NONE  # a retry of the request that ended it
            if state == (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT):
                return E.CONCURRENT_TRANSACTIONS
            return E.INVALID_TXN_STATE

    async def end_transaction_bumping(self, transactional_id: str, producer_id: int, epoch: int,
                                      commit: bool) -> tuple[ErrorCode, int, int]:
        """Commits or aborts with transaction version 2 (EndTxn v5, KIP-890 part 2):
        (error, producer id, epoch the producer uses next). The transaction ends at
        epoch + 1, so the markers fence every batch of it still in flight; an exhausted
        epoch moves the id to a new producer id at epoch 0. An abort with no transaction
        open bumps the epoch too (the producer cannot know whether a Produce opened
        one). A retry after the bump (the epoch before it, the transaction ending or
        ended the same way) gets the same answer again."""
        error = self._coordinator_error(transactional_id)
        if error is not None:
            return error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        meta = self.txns.get(transactional_id)
        if meta is None:
            return E.INVALID_PRODUCER_ID_MAPPING, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        await self._await_completion(meta)
        async with meta.lock:
            if self.txns.get(transactional_id) is not meta:
                return E.NOT_COORDINATOR, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
            if meta.pending is not None:
                return E.CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
            state = meta.state
            ending = (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT) if commit \
                else (TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT)
            retry = (epoch == meta.last_producer_epoch and producer_id == meta.producer_id) or (
                producer_id == meta.previous_producer_id != meta.producer_id
                and epoch == MAX_PRODUCER_EPOCH - 1 and meta.producer_epoch == 0)
            if retry and state in ending:
                return E.NONE, *self._next_producer(meta)
            if producer_id != meta.producer_id:
                return E.INVALID_PRODUCER_ID_MAPPING, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
            if epoch != meta.producer_epoch:
                return E.PRODUCER_FENCED, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
            if state in PREPARING:
                return E.CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
            if state != TxnState.ONGOING and (commit or state not in SETTLED):
                return E.INVALID_TXN_STATE, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
            next_id: int | None = NO_PRODUCER_ID
            if meta.producer_epoch + 1 >= MAX_PRODUCER_EPOCH:
                next_id = await self._new_producer_id()
                if next_id is None:
                    return E.COORDINATOR_LOAD_IN_PROGRESS, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
            error = await self._prepare_end(meta, commit, epoch=meta.producer_epoch + 1, next_producer_id=next_id,
                                            client_transaction_version=2)
            if error != E.NONE:
                return error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
            return E.NONE, *self._next_producer(meta)

    @staticmethod
    def _next_producer(meta: TxnMetadata) -> tuple[int, int]:
        """The producer id and epoch of the id's next transaction."""
        if meta.next_producer_id != NO_PRODUCER_ID:
            return meta.next_producer_id, 0
        return meta.producer_id, meta.producer_epoch

    async def _prepare_end(self, meta: TxnMetadata, commit: bool, epoch: int, **changes: Any) -> ErrorCode:
        """PrepareCommit/PrepareAbort at ``epoch`` (with ``changes``: the next producer
        id, the client's transaction version), then the markers in the background."""
        now = self.clock.time_ms()
        error = await self._write(meta, meta.record(
            producer_epoch=epoch, state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
            last_update_timestamp_ms=now, **changes))
        if error == E.NONE:
            self._start_completion(meta, commit)
        return error

    def _start_completion(self, meta: TxnMetadata, commit: bool) -> None:
        meta.completion = self._spawn(self._complete(meta, commit))

    async def _complete(self, meta: TxnMetadata, commit: bool) -> None:
        """Writes the markers until every partition has one (or this broker stops
        coordinating the id), then the CompleteCommit/CompleteAbort state."""
        # One turn of the loop first. Markers on this broker's own partitions are written
        # without a wait, so this whole completion would otherwise run before the answer to
        # the EndTxn that started it goes out (the answer is sent by the request task's
        # done callback, queued behind this task's first step): the producer would wait
        # for the markers and CompleteCommit too. Its next request that meets them still
        # being written waits for them (_await_completion).
        await asyncio.sleep(0)
        loaded = self._loaded.get(meta.partition)
        if loaded is None:
            return
        pending = set(meta.partitions)
        backoff = MARKER_RETRY_BACKOFF_S
        while pending and self._loaded.get(meta.partition) is loaded and not self._stopped:
            try:
                codes = await self.markers.write(meta.producer_id, meta.producer_epoch, commit,
                                                 loaded.coordinator_epoch, pending)
            except Exception:  # a bug or an unexpected answer: log it and try again later
                log.exception("transactional id %s: writing markers failed", meta.transactional_id)
                codes = {}
            for partition, code in codes.items():
                if code in (E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION, E.INVALID_PRODUCER_EPOCH):
                    # Written; or the partition is gone; or a newer epoch already ended it.
                    pending.discard(partition)
            if pending:
                log.debug("transactional id %s: markers pending on %s (%s)", meta.transactional_id,
                          sorted(pending), {p: codes.get(p) for p in pending})
                await self.clock.sleep(backoff)
                backoff = min(backoff * 2, MARKER_RETRY_BACKOFF_MAX_S)
        if pending:
            return
        async with meta.lock:
            if self.txns.get(meta.transactional_id) is not meta:
                return
            next_id = meta.next_producer_id
            # The id goes on with the next producer id, if the transaction handed one over.
            changes: dict[str, Any] = {} if next_id == NO_PRODUCER_ID else {
                "producer_id": next_id, "producer_epoch": 0, "next_producer_id": NO_PRODUCER_ID}
            await self._write(meta, meta.record(
                state=TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT,
                partitions=frozenset(), last_update_timestamp_ms=self.clock.time_ms(), **changes))
        meta.completion = None

    @staticmethod
    async def _await_completion(meta: TxnMetadata) -> None:
        """Waits (a bounded while) for the markers of the id's ending transaction, so the
        request that follows a commit is answered for the transaction after it rather
        than CONCURRENT_TRANSACTIONS. Not holding ``meta.lock``: the completion takes it."""
        task = meta.completion
        if task is not None and not task.done():
            await asyncio.wait((task,), timeout=COMPLETION_WAIT_S)

    async def wait_completed(self, transactional_id: str) -> None:
        """Until the markers of the id's ending transaction are written (visible for
        testing)."""
        meta = self.txns.get(transactional_id)
        if meta is not None and meta.completion is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(meta.completion)

    # -- timeouts and expiry ------------------------------------------------------------------

    async def abort_timed_out(self) -> int:
        """Aborts (with an epoch bump, so the producer is fenced) every open transaction
        older than its transaction.timeout.ms. Returns how many."""
        now = self.clock.time_ms()
        count = 0
        for meta in list(self.txns.values()):
            if meta.state != TxnState.ONGOING or now - meta.start_ms <= meta.timeout_ms:
                continue
            async with meta.lock:
                if (meta.state != TxnState.ONGOING or meta.pending is not None
                        or self.txns.get(meta.transactional_id) is not meta):
                    continue
                log.info("transactional id %s: aborting its transaction open for %d ms "
                         "(transaction.timeout.ms %d)", meta.transactional_id, now - meta.start_ms, meta.timeout_ms)
                if await self._abort_fencing(meta) == E.NONE:
                    count += 1
        return count

    async def expire_transactional_ids(self) -> int:
        """Forgets ids idle for transactional.id.expiration.ms with no open transaction
        (a tombstone in ``__transaction_state``)."""
        now = self.clock.time_ms()
        count = 0
        for meta in list(self.txns.values()):
            if meta.state not in SETTLED or now - meta.update_ms <= self.config.id_expiration_ms:
                continue
            async with meta.lock:
                if (meta.state not in SETTLED or meta.pending is not None
                        or self.txns.get(meta.transactional_id) is not meta):
                    continue
                if await self._write(meta, None) == E.NONE:
                    self.txns.pop(meta.transactional_id, None)
                    count += 1
        return count

    # -- describe --------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> tuple[ErrorCode, TxnMetadata | None]:
        error = self._coordinator_error(transactional_id)
        if error is not None:
            return error, None
        meta = self.txns.get(transactional_id)
        return (E.TRANSACTIONAL_ID_NOT_FOUND, None) if meta is None else (E.NONE, meta)

    def list_transactions(self) -> list[TxnMetadata]:
        return sorted(self.txns.values(), key=lambda m: m.transactional_id)
