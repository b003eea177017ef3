"""``pykfk log dump PATH...``: read segment files offline, like kafka-dump-log.

For each ``.log``: every batch (position, offsets, count, size, CRC-32C stored and
computed, codec, timestamps, producer), with its framing, CRC and records checked; offsets
must grow from batch to batch. For each ``.index`` / ``.timeindex`` next to it (or named
alone): every entry must point at a batch of the log (offset index: the batch's position,
an offset inside it; time index: timestamps that never go back, offsets inside the
segment). Files are only read. Exit 1 when anything is damaged.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from collections.abc import Iterator
from typing import Any

import click

from pykfk._core.crc import crc32c
from pykfk._core.errors import CorruptBatchError
from pykfk._core.records import (
    BATCH_FIELD_OFFSETS,
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    iter_records,
    parse_batch_header,
    validate_batches,
)
from pykfk._core.segment import used_entries
from pykfk.cli.common import (
    CliContext,
    CliError,
    emit_json,
    emit_table,
    format_time_ms,
    output_option,
    pass_cli,
    progress,
)
from pykfk.cli.console import decode_field

CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_BASE_AND_LENGTH = struct.Struct(">qi")
_INDEX_ENTRY = struct.Struct(">ii")
_TIMEINDEX_ENTRY = struct.Struct(">qi")
_CRC_AT = BATCH_FIELD_OFFSETS["crc"]
_ATTRIBUTES_AT = BATCH_FIELD_OFFSETS["attributes"]
_MAGIC_AT = BATCH_FIELD_OFFSETS["magic"]
# Show a progress bar for files at least this big.
_PROGRESS_BYTES = 32 << 20


class SegmentReport:
    """What one file holds and what is wrong with it."""

    def __init__(self, path: str, kind: str, offsets: OffsetRange = (0, None)):
        self.path, self.kind = path, kind
        self.offsets = offsets
        self.batches: list[dict[str, Any]] = []
        self.entries: list[dict[str, Any]] = []
        self.problems: list[str] = []

    def shown_batches(self) -> list[dict[str, Any]]:
        """The batches holding an offset of the range asked for (all are checked)."""
        return [b for b in self.batches if _overlaps(b["base_offset"], b["last_offset"], self.offsets)]

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "kind": self.kind, "ok": not self.problems,
                               "problems": self.problems}
        if self.kind == "log":
            out["batches"] = self.shown_batches()
        else:
            out["entries"] = self.entries
        return out


OffsetRange = tuple[int, int | None]


def _overlaps(first: int, last: int, offsets: OffsetRange) -> bool:
    start, end = offsets
    return last >= start and (end is None or first <= end)


def _read_file(path: str) -> bytes | mmap.mmap:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return b""
        return mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)


def base_offset_of(path: str) -> int:
    stem = os.path.basename(path).split(".")[0]
    if not stem.isdigit():
        raise CliError(f"{path}: not a segment file (names are a 20-digit base offset)")
    return int(stem)


# ------------------------------------------------------------------------------ .log


def _batch_problem(data: Any, pos: int, size: int) -> str | None:
    try:
        validate_batches(memoryview(data)[pos : pos + size])
    except CorruptBatchError as exc:
        return str(exc).replace("batch at byte 0", f"batch at position {pos}")
    return None


def _walk_batches(data: Any, report: SegmentReport, records: bool,
                  value_encoding: str) -> Iterator[int]:
    # Every batch is checked and listed (the index checks need them all); records are
    # decoded only for the batches inside the offset range.
    """Appends each batch to ``report``; yields bytes walked so far (for progress)."""
    pos, next_offset, size = 0, -1, len(data)
    while pos < size:
        if size - pos < LOG_OVERHEAD:
            report.problems.append(f"position {pos}: {size - pos} trailing bytes, a torn batch header")
            return
        base_offset, batch_length = _BASE_AND_LENGTH.unpack_from(data, pos)
        batch_size = batch_length + LOG_OVERHEAD
        if batch_size < BATCH_HEADER_SIZE or pos + batch_size > size:
            report.problems.append(
                f"position {pos}: batch length {batch_length} runs past the end of the file "
                f"({size - pos} bytes left): a torn or damaged batch; nothing after it is readable")
            return
        batch = _describe_batch(data, pos, batch_size, base_offset)
        if batch["problem"]:
            report.problems.append(f"position {pos} (base offset {base_offset}): {batch['problem']}")
        elif base_offset < next_offset:
            report.problems.append(f"position {pos}: base offset {base_offset} is below the "
                                   f"previous batch's next offset {next_offset}")
        if records and not batch["problem"] and _overlaps(base_offset, batch["last_offset"],
                                                          report.offsets):
            batch["records"] = _records(data, pos, batch_size, value_encoding, report.offsets,
                                        batch["timestamp_type"])
        report.batches.append(batch)
        next_offset = max(next_offset, batch["last_offset"] + 1)
        pos += batch_size
        yield pos


def _describe_batch(data: Any, pos: int, batch_size: int, base_offset: int) -> dict[str, Any]:
    magic = data[pos + _MAGIC_AT]
    stored_crc = struct.unpack_from(">I", data, pos + _CRC_AT)[0]
    entry: dict[str, Any] = {"position": pos, "base_offset": base_offset, "size": batch_size,
                             "magic": magic, "crc": stored_crc}
    if magic != 2:
        entry.update(last_offset=base_offset, valid=False,
                     problem=f"magic {magic}: not a v2 record batch")
        return entry
    header = parse_batch_header(data, pos)
    computed = crc32c(data, pos + _ATTRIBUTES_AT, pos + batch_size)
    entry.update(
        last_offset=header.last_offset, count=header.records_count,
        computed_crc=computed, compression=CODEC_NAMES.get(header.compression, "?"),
        timestamp_type="LogAppendTime" if header.timestamp_type else "CreateTime",
        base_timestamp=header.base_timestamp, max_timestamp=header.max_timestamp,
        partition_leader_epoch=header.partition_leader_epoch,
        producer_id=header.producer_id, producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence, transactional=header.is_transactional,
        control=header.is_control,
    )
    if computed != stored_crc:
        entry["problem"] = (f"CRC-32C mismatch: stored {stored_crc:#010x}, computed "
                            f"{computed:#010x} (corrupt batch)")
    else:
        entry["problem"] = _batch_problem(data, pos, batch_size)
    entry["valid"] = entry["problem"] is None
    return entry


def _records(data: Any, pos: int, batch_size: int, value_encoding: str,
             offsets: OffsetRange, timestamp_type: str) -> list[dict[str, Any]]:
    """The records of one batch; ``timestamp_type`` is the batch's (with LogAppendTime
    every record carries the batch's max timestamp, as Kafka's clients read it)."""
    return [{"offset": r.offset, "timestamp": r.timestamp, "timestamp_type": timestamp_type,
             "key_size": -1 if r.key is None else len(r.key),
             "value_size": -1 if r.value is None else len(r.value),
             "key": decode_field(r.key, value_encoding),
             "value": decode_field(r.value, value_encoding),
             "headers": [[k, decode_field(v, "utf8")] for k, v in r.headers]}
            for r in iter_records(memoryview(data)[pos : pos + batch_size])
            if _overlaps(r.offset, r.offset, offsets)]


def dump_log(path: str, *, records: bool = False, value_encoding: str = "utf8",
             offsets: OffsetRange = (0, None)) -> SegmentReport:
    report = SegmentReport(path, "log", offsets)
    data = _read_file(path)
    try:
        big = len(data) >= _PROGRESS_BYTES
        with progress(len(data), os.path.basename(path), enabled=big) as advance:
            done = 0
            for walked in _walk_batches(data, report, records, value_encoding):
                advance(walked - done)
                done = walked
    finally:
        if isinstance(data, mmap.mmap):
            data.close()
    return report


# --------------------------------------------------------------------------- indexes


def _batch_index(log: SegmentReport) -> dict[int, dict[str, Any]]:
    return {b["position"]: b for b in log.batches}


def check_offset_index(path: str, base: int, log: SegmentReport | None) -> SegmentReport:
    report = SegmentReport(path, "index")
    data = _read_file(path)
    if len(data) % _INDEX_ENTRY.size:
        report.problems.append(f"size {len(data)} is not a whole number of 8-byte entries")
    count = used_entries(data, _INDEX_ENTRY.size) if len(data) >= _INDEX_ENTRY.size else 0
    batches = _batch_index(log) if log else {}
    previous = (-1, -1)
    for i in range(count):
        relative, position = _INDEX_ENTRY.unpack_from(data, i * _INDEX_ENTRY.size)
        offset = base + relative
        report.entries.append({"entry": i, "offset": offset, "position": position})
        if (relative, position) <= previous or relative < previous[0] or position < previous[1]:
            report.problems.append(f"entry {i}: offset {offset} at position {position} does "
                                   "not follow the previous entry")
        previous = (relative, position)
        if log is None:
            continue
        batch = batches.get(position)
        if batch is None:
            report.problems.append(f"entry {i}: position {position} is not the start of a batch")
        elif not batch["base_offset"] <= offset <= batch["last_offset"]:
            report.problems.append(f"entry {i}: offset {offset} is not in the batch at position "
                                   f"{position} (offsets {batch['base_offset']}-{batch['last_offset']})")
    if isinstance(data, mmap.mmap):
        data.close()
    return report


def check_time_index(path: str, base: int, log: SegmentReport | None) -> SegmentReport:
    report = SegmentReport(path, "timeindex")
    data = _read_file(path)
    if len(data) % _TIMEINDEX_ENTRY.size:
        report.problems.append(f"size {len(data)} is not a whole number of 12-byte entries")
    count = used_entries(data, _TIMEINDEX_ENTRY.size) if len(data) >= _TIMEINDEX_ENTRY.size else 0
    last_offset = max((b["last_offset"] for b in log.batches), default=base - 1) if log else None
    previous_time = -1
    for i in range(count):
        timestamp, relative = _TIMEINDEX_ENTRY.unpack_from(data, i * _TIMEINDEX_ENTRY.size)
        offset = base + relative
        report.entries.append({"entry": i, "timestamp": timestamp, "offset": offset})
        if timestamp < previous_time:
            report.problems.append(f"entry {i}: timestamp {timestamp} is before the previous "
                                   f"entry's {previous_time}")
        previous_time = timestamp
        if last_offset is not None and not base <= offset <= last_offset:
            report.problems.append(f"entry {i}: offset {offset} is outside the segment "
                                   f"({base}-{last_offset})")
    if isinstance(data, mmap.mmap):
        data.close()
    return report


# ------------------------------------------------------------------------------ paths


def _segment_logs(path: str) -> list[str]:
    """The .log files PATH names: itself, or a partition directory's segments."""
    if os.path.isdir(path):
        logs = sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".log"))
        if not logs:
            raise CliError(f"{path}: no .log segment files in this directory")
        return logs
    return [path]


def dump_path(path: str, *, records: bool, check_indexes: bool,
              value_encoding: str, offsets: OffsetRange = (0, None)) -> list[SegmentReport]:
    reports = []
    for file in _segment_logs(path):
        stem, ext = os.path.splitext(file)
        base = base_offset_of(file)
        if ext not in (".log", ".index", ".timeindex"):
            raise CliError(f"{file}: not a .log, .index or .timeindex file")
        log = dump_log(stem + ".log", records=records, value_encoding=value_encoding,
                       offsets=offsets) \
            if os.path.exists(stem + ".log") else None
        if ext == ".log" and log is not None:
            reports.append(log)
        if check_indexes or ext != ".log":
            for suffix, checker in ((".index", check_offset_index),
                                    (".timeindex", check_time_index)):
                if (ext in (".log", suffix)) and os.path.exists(stem + suffix):
                    reports.append(checker(stem + suffix, base, log))
    return reports


# ---------------------------------------------------------------------------- command


@click.group("log")
def log_group() -> None:
    """Offline tools for segment files."""


@log_group.command("dump")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--deep-iteration", is_flag=True,
              help="A line per record: offset, timestamp, key and value sizes, header keys.")
@click.option("--print-data-log", "--records", "-r", "print_data", is_flag=True,
              help="A line per record with its key, value and headers (implies --deep-iteration).")
@click.option("--start-offset", type=click.IntRange(min=0), default=0,
              help="Show the batches and records from this offset on.")
@click.option("--end-offset", type=click.IntRange(min=0),
              help="Show the batches and records up to this offset (inclusive).")
@click.option("--index-check/--no-index-check", default=True,
              help="Check the .index and .timeindex beside each .log [default: on].")
@click.option("--value-encoding", type=click.Choice(["utf8", "base64", "hex", "json"]),
              default="utf8", help="How --print-data-log prints keys and values.")
@output_option
@pass_cli
def dump(cli: CliContext, paths: tuple[str, ...], deep_iteration: bool, print_data: bool,
         start_offset: int, end_offset: int | None, index_check: bool,
         value_encoding: str) -> None:
    """Batches, offsets, CRCs and index checks of segment files (PATHS: .log, .index or
    .timeindex files, or partition directories), like kafka-dump-log.sh. Every batch is
    checked; --start-offset/--end-offset choose what is shown. Exits 1 when something
    is damaged."""
    if end_offset is not None and end_offset < start_offset:
        raise click.BadParameter(f"{end_offset} is below --start-offset {start_offset}",
                                 param_hint="--end-offset")
    records = deep_iteration or print_data
    reports = []
    for path in paths:
        try:
            reports += dump_path(path, records=records, check_indexes=index_check,
                                 value_encoding=value_encoding, offsets=(start_offset, end_offset))
        except OSError as exc:
            raise CliError(f"{path}: {exc.strerror or exc}") from None
    problems = sum(len(r.problems) for r in reports)
    if cli.json:
        emit_json({"ok": problems == 0, "problems": problems,
                   "files": [r.as_json() for r in reports]})
    else:
        for r in reports:
            _print_report(r, records, print_data)
    if problems:
        raise CliError(f"{problems} problem{'s' if problems > 1 else ''} found")


def _print_report(report: SegmentReport, records: bool, payload: bool) -> None:
    click.echo(f"Dumping {report.path}")
    if report.kind == "log":
        shown = report.shown_batches()
        rows = [{**b, "crc": f"{b['crc']:#010x}",
                 "max_timestamp": format_time_ms(b.get("max_timestamp", -1)),
                 "valid": b.get("valid", False)} for b in shown]
        emit_table(rows, ["position", "base_offset", "last_offset", "count", "size", "crc",
                          "compression", "timestamp_type", "max_timestamp", "valid"],
                   ["position", "base offset", "last offset", "count", "size", "crc",
                    "codec", "timestamp type", "max timestamp", "valid"])
        if records:
            for b in shown:
                for r in b.get("records", []):
                    click.echo(record_line(r, payload))
    else:
        columns = ["entry", "offset", "position"] if report.kind == "index" \
            else ["entry", "timestamp", "offset"]
        emit_table(report.entries, columns)
    for problem in report.problems:
        click.echo(f"PROBLEM: {problem}")
    click.echo()


def record_line(record: dict[str, Any], payload: bool) -> str:
    """kafka-dump-log's record line: ``| offset: 5 CreateTime: 1714521600000 keySize: 3
    ...`` (``LogAppendTime:`` for a batch the broker stamped); with the payload, the key,
    the value and the headers as key=value pairs."""
    header_keys = ",".join(k for k, _v in record["headers"])
    line = (f"| offset: {record['offset']} {record['timestamp_type']}: {record['timestamp']} "
            f"keySize: {record['key_size']} valueSize: {record['value_size']} "
            f"headerKeys: [{header_keys}]")
    if payload:
        headers = ",".join(f"{k}={_text(v)}" for k, v in record["headers"])
        line += (f" key: {_text(record['key'])} payload: {_text(record['value'])}"
                 f" headers: [{headers}]")
    return line


def _text(value: Any) -> str:
    if value is None:
        return "null"
    return value if isinstance(value, str) else json.dumps(value)


COMMANDS = [log_group]
