"""Record batches: Kafka message format v2 (apache/kafka DefaultRecordBatch) and legacy
magic 0/1 message sets (LegacyRecord). Compiled from records.pyx; layout in batch.h.

Buffers: every function takes any C-contiguous buffer (bytes, bytearray, memoryview, mmap);
the patching functions need a writable one. No buffer export outlives a call (an mmap can be
closed right after), and iter_records holds the buffer only while it decodes one batch.
Non-contiguous buffers raise BufferError.

Errors (pykfk._core.errors), each with .field (the offending field's name), .offset (the
batch's position in the buffer) and .field_offset (the field's position):
- CorruptBatchError: bad magic, batch_length, CRC, truncation, undecodable compressed data
  (field "records");
- InvalidRecordError (subclass): the CRC matches but a rule is broken: codec id > 4,
  records_count / last_offset_delta, record framing ("record.length", "record.key", ...);
- RecordTooLargeError (subclass): a batch above max_batch_size, or compressed records that
  expand beyond max_decompressed_size.

Nothing allocates in proportion to a number read from the bytes: records_count, lengths and
header counts are checked against the bytes present, and decompression writes into a
bounded buffer (compression bombs end in RecordTooLargeError).
"""

from array import array
from collections.abc import Iterator, Sequence
from typing import Final

from typing_extensions import Buffer

CODEC_NONE: Final = 0
CODEC_GZIP: Final = 1
CODEC_SNAPPY: Final = 2
CODEC_LZ4: Final = 3
CODEC_ZSTD: Final = 4
DEFAULT_MAX_DECOMPRESSED_SIZE: Final[int]
"""64 MiB: the most one compressed batch (or legacy wrapper) may expand to by default."""

class BatchHeader:
    """The 61-byte header of a magic 2 batch. Read-only."""

    @property
    def base_offset(self) -> int: ...
    @property
    def batch_length(self) -> int: ...
    @property
    def partition_leader_epoch(self) -> int: ...
    @property
    def magic(self) -> int: ...
    @property
    def crc(self) -> int: ...
    @property
    def attributes(self) -> int:
        """The attributes field, Kafka's int16 (codec, timestamp type, transactional,
        control bits)."""
    @property
    def last_offset_delta(self) -> int: ...
    @property
    def base_timestamp(self) -> int: ...
    @property
    def max_timestamp(self) -> int: ...
    @property
    def producer_id(self) -> int: ...
    @property
    def producer_epoch(self) -> int: ...
    @property
    def base_sequence(self) -> int: ...
    @property
    def records_count(self) -> int: ...
    @property
    def compression(self) -> int:
        """Codec id 0-4 (none, gzip, snappy, lz4, zstd)."""
    @property
    def timestamp_type(self) -> int:
        """0 CreateTime, 1 LogAppendTime."""
    @property
    def is_transactional(self) -> bool: ...
    @property
    def is_control(self) -> bool: ...
    @property
    def size(self) -> int:
        """Bytes the batch occupies: batch_length + 12."""
    @property
    def last_offset(self) -> int:
        """base_offset + last_offset_delta."""
    @property
    def next_offset(self) -> int:
        """last_offset + 1."""
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...

class Record:
    """One record as a consumer sees it; batch-level fields are on .batch."""

    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int:
        """base_timestamp + timestamp_delta, or the batch's max_timestamp for LogAppendTime."""
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> list[tuple[str, bytes | None]]: ...
    @property
    def batch(self) -> BatchHeader: ...
    @property
    def timestamp_type(self) -> int: ...
    @property
    def is_control(self) -> bool: ...
    @property
    def is_transactional(self) -> bool: ...
    @property
    def producer_id(self) -> int: ...
    @property
    def producer_epoch(self) -> int: ...
    @property
    def partition_leader_epoch(self) -> int: ...
    @property
    def sequence(self) -> int:
        """base_sequence + offset delta (mod 2^31), -1 when the batch has no sequence."""

class DecodedRecords:
    """Columnar result of decode_records: Python objects are made only for the records a
    caller takes (key(i), value(i), headers(i), record(i), iteration).

    Per record i: offsets[i], timestamps[i] (resolved as Record.timestamp), batch_index[i]
    (index into .batches), key_starts[i]/key_lengths[i] and value_starts[i]/value_lengths[i]
    (spans into .data; length -1 = null). Headers of record i are entries
    header_index[i] .. header_index[i+1]-1 of the header_* span arrays.
    """

    @property
    def offsets(self) -> array[int]:
        """array('q')"""
    @property
    def timestamps(self) -> array[int]:
        """array('q')"""
    @property
    def batch_index(self) -> array[int]:
        """array('i')"""
    @property
    def key_starts(self) -> array[int]: ...
    @property
    def key_lengths(self) -> array[int]: ...
    @property
    def value_starts(self) -> array[int]: ...
    @property
    def value_lengths(self) -> array[int]: ...
    @property
    def header_index(self) -> array[int]:
        """array('q') of len(self) + 1 prefix positions into the header span arrays."""
    @property
    def header_key_starts(self) -> array[int]: ...
    @property
    def header_key_lengths(self) -> array[int]: ...
    @property
    def header_value_starts(self) -> array[int]: ...
    @property
    def header_value_lengths(self) -> array[int]: ...
    @property
    def batches(self) -> list[BatchHeader]:
        """Headers of the batches that contributed records (control batches only when
        include_control)."""
    @property
    def data(self) -> bytes:
        """Every key, value and header byte, concatenated."""
    @property
    def next_offset(self) -> int:
        """Where a consumer fetches next: after the last whole batch (start_offset if none)."""
    @property
    def bytes_consumed(self) -> int:
        """Bytes of whole batches decoded; a partial trailing batch starts here."""
    @property
    def count(self) -> int: ...
    def __len__(self) -> int: ...
    def key(self, i: int) -> bytes | None: ...
    def value(self, i: int) -> bytes | None: ...
    def headers(self, i: int) -> list[tuple[str, bytes | None]]: ...
    def record(self, i: int) -> Record: ...
    def __getitem__(self, i: int) -> Record: ...
    def __iter__(self) -> Iterator[Record]: ...

def parse_batch_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Header of the batch at buf[pos:]. Needs the 61 header bytes only; checks magic and
    batch_length, not the CRC."""

def validate_batches(
    buf: Buffer,
    max_batch_size: int = 0,
    check_records: bool = True,
    *,
    from_client: bool = False,
    decompress: bool = False,
    max_decompressed_size: int = ...,
) -> list[BatchHeader]:
    """Checks that buf is a sequence of complete, valid magic 2 batches (a Produce payload);
    returns their headers ([] for an empty buffer).

    Per batch: magic 2, batch_length >= 49 and within the buffer, size <= max_batch_size
    (0 = no limit), CRC-32C, codec id <= 4, records_count >= 0, last_offset_delta >= 0 and
    >= records_count - 1. With check_records, the records of uncompressed batches (and of
    compressed ones when decompress is set): exactly records_count records, every varint
    minimal-width-bounded (5 bytes for int32, 10 for int64), lengths within the record,
    offset deltas strictly increasing and <= last_offset_delta, no bytes left over.
    from_client adds the rules for batches straight from a producer (Kafka's LogValidator):
    at least one record, offset deltas exactly 0..n-1, last_offset_delta = n - 1.
    """

def validate_and_assign(
    buf: Buffer,
    base_offset: int,
    partition_leader_epoch: int,
    max_batch_size: int = 0,
    *,
    decompress: bool = False,
    log_append_time_ms: int = -1,
    max_batches: int = 0,
    max_decompressed_size: int = ...,
) -> list[BatchHeader]:
    """The leader's one pass over a producer's batches (Kafka's LogValidator): the checks
    of ``validate_batches(..., from_client=True)`` and, batch by batch as each passes,
    base_offset (running from ``base_offset``) and partition_leader_epoch written in
    place, plus LogAppendTime and a new CRC-32C when ``log_append_time_ms`` >= 0. Returns
    the headers as patched. ``max_batches`` > 0 raises InvalidRecordError beyond that
    many batches (Produce v3+ allows one). The buffer must be writable; on error nothing
    is to be written (earlier batches may be patched already)."""

BATCH_HEADER_SIZE: int
"""61: the fixed v2 batch header (batch.h)."""
LOG_OVERHEAD: int
"""12: base_offset and batch_length, the bytes batch_length does not count."""
BATCH_HEADER_FORMAT: str
"""The struct format of the 61 header bytes (attributes as Kafka's int16)."""
BATCH_FIELD_OFFSETS: dict[str, int]
"""Header field -> byte offset in the batch (batch.h's table)."""
ATTR_CODEC_MASK: int
ATTR_TIMESTAMP_TYPE: int
ATTR_TRANSACTIONAL: int
ATTR_CONTROL: int

def assign_offsets(buf: Buffer, base_offset: int, partition_leader_epoch: int = -1) -> int:
    """In place, for every batch of the writable buffer: base_offset (running) and
    partition_leader_epoch. Both sit before the CRC-covered bytes, so CRCs stay valid.
    Returns the offset after the last batch. The framing is checked first; on error the
    buffer is left untouched."""

def set_log_append_time(buf: Buffer, timestamp_ms: int) -> None:
    """In place, for every batch: timestamp type LogAppendTime (attributes bit 3),
    max_timestamp = timestamp_ms, CRC-32C recomputed."""

def scan_batches(buf: Buffer, start: int = 0) -> tuple[int, int]:
    """(batch_count, complete_bytes) for the whole batches in buf[start:]; complete_bytes
    counts from start, so a partial tail begins at start + complete_bytes. Reads lengths and
    magic only. Raises CorruptBatchError for a length or magic no batch can have."""

def is_legacy(buf: Buffer) -> bool:
    """True when buf starts with a magic 0 or 1 message (magic byte at position 16)."""

def convert_legacy(buf: Buffer, *, max_decompressed_size: int = ...) -> bytearray:
    """Validates a complete magic 0/1 message set (sizes, CRC-32 of every message, codec,
    key/value lengths; compressed wrappers decompressed and their inner messages checked the
    same way: uncompressed, same magic) and returns its records as one uncompressed magic 2
    batch (empty bytearray for an empty set). Offsets are renumbered 0..n-1 as on Kafka's
    produce path; timestamps kept (-1 for magic 0; a LogAppendTime wrapper's time for its
    inner messages). The converted records may total at most max_decompressed_size bytes
    (all wrappers together), else RecordTooLargeError."""

def to_legacy(buf: Buffer, magic: int, *, max_decompressed_size: int = ...) -> bytes:
    """Down-converts the whole magic 2 batches of buf to an uncompressed magic 0/1 message
    set (absolute offsets; magic 1 keeps timestamps and the LogAppendTime flag); headers are
    dropped and control batches skipped, as Kafka's down-conversion does. A partial trailing
    batch is dropped."""

def build_batch(
    records: Sequence[tuple[Buffer | None, Buffer | None, int | None, Sequence[tuple[str | bytes, Buffer | None]] | None]],
    *,
    base_offset: int = 0,
    compression: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    timestamp_type: int = 0,
    is_transactional: bool = False,
    is_control: bool = False,
    offset_deltas: Sequence[int] | None = None,
    last_offset_delta: int = -1,
) -> bytes:
    """One magic 2 batch of (key, value, timestamp_ms, headers) records (timestamp None =
    now), offset deltas 0..n-1, base_timestamp = the first record's timestamp. Compression:
    gzip; snappy in the xerial framing the Java client writes; LZ4 frame with independent
    blocks (KIP-57); zstd.

    ``offset_deltas`` (one per record, strictly increasing, 0 .. 2^31-1) gives records
    explicit offsets base_offset + delta, as log compaction leaves them;
    ``last_offset_delta`` (-1 = the last record's delta) may be larger, so a rewritten batch
    keeps its original offset range (Kafka's ``overrideLastOffset``). ValueError otherwise."""

def iter_records(buf: Buffer, start: int = 0, *, max_decompressed_size: int = ...) -> Iterator[Record]:
    """Every record of the whole batches in buf[start:], control records included,
    decompressing gzip, snappy (raw or xerial), lz4 and zstd. Each batch's CRC and framing
    are checked before its records are yielded; stops silently at a partial trailing batch."""

def decode_records(
    buf: Buffer,
    start_offset: int = 0,
    *,
    include_control: bool = False,
    max_decompressed_size: int = ...,
) -> DecodedRecords:
    """Fast consumer decode: all whole batches of buf (a Fetch response's records), records
    below start_offset skipped (a fetch returns the whole batch containing its offset),
    control batches skipped unless include_control, partial trailing batch ignored.
    Same checks as iter_records. max_decompressed_size bounds each batch, not the total
    (the caller bounds the input, e.g. with Fetch max_bytes)."""
