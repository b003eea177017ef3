"""Exceptions raised by the compiled core. Plain Python, no Kafka error codes:
pykfk.errors maps them to the codes a Kafka broker would send."""


class ProtocolError(ValueError):
    """Bytes that do not decode as the declared message (truncated, oversized lengths,
    negative counts, bad varints, invalid UTF-8, trailing garbage). A broker answers
    INVALID_REQUEST or closes the connection. Raised by the compiled Produce/Fetch walk
    and by the generic codec (``pykfk.protocol`` re-exports it)."""


class CoreError(Exception):
    """Base class of every error the compiled core raises."""


class CorruptBatchError(CoreError):
    """Bytes that are not a valid record batch (bad length, magic, CRC or framing).

    ``field`` names the offending field, ``offset`` is the absolute position of the
    batch in the buffer that was checked, ``field_offset`` the position of the field.
    Maps to CORRUPT_MESSAGE.
    """

    def __init__(self, message: str, field: str = "", offset: int = 0, field_offset: int = 0):
        super().__init__(f"{message} (field {field} at byte {field_offset}, batch at byte {offset})")
        self.field = field
        self.offset = offset
        self.field_offset = field_offset


class InvalidRecordError(CorruptBatchError):
    """A batch whose framing is sound but whose records break a rule (INVALID_RECORD)."""


class RecordTooLargeError(CorruptBatchError):
    """A batch (or its decompressed records) larger than the configured maximum
    (MESSAGE_TOO_LARGE). The bytes may be sound; the limit is policy."""


class IndexCorruptError(CoreError):
    """An offset or time index whose entries are out of order or out of range."""
