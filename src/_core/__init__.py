"""pykfk's compiled core: CRCs, record-batch framing, segments and indexes, sendfile.

Importing this package fails with a clear message when the extensions were not built.
"""

try:
    from pykfk._core.crc import crc32, crc32c, hardware_features
except ImportError as exc:  # pragma: no cover - exercised only on broken installs
    raise ImportError(
        "pykfk's compiled core is missing (pykfk._core.crc could not be imported): "
        "install pykfk with `pip install .` or build it in place with `make compile`"
    ) from exc

from pykfk._core.errors import (
    CoreError,
    CorruptBatchError,
    IndexCorruptError,
    InvalidRecordError,
    RecordTooLargeError,
)
from pykfk._core.records import (
    BatchHeader,
    DecodedRecords,
    Record,
    assign_offsets,
    build_batch,
    convert_legacy,
    decode_records,
    is_legacy,
    iter_records,
    parse_batch_header,
    scan_batches,
    set_log_append_time,
    to_legacy,
    validate_batches,
)

__all__ = [
    "BatchHeader",
    "CoreError",
    "CorruptBatchError",
    "DecodedRecords",
    "IndexCorruptError",
    "InvalidRecordError",
    "Record",
    "RecordTooLargeError",
    "assign_offsets",
    "build_batch",
    "convert_legacy",
    "crc32",
    "crc32c",
    "decode_records",
    "hardware_features",
    "is_legacy",
    "iter_records",
    "parse_batch_header",
    "scan_batches",
    "set_log_append_time",
    "to_legacy",
    "validate_batches",
]
