"""``pykfk produce`` and ``pykfk consume``: records from stdin to a topic and back,
as plain lines or JSON lines, with keys, headers and binary-safe encodings."""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import sys
import time
from collections.abc import Iterator
from typing import IO, Any

import click

from pykfk._core.records import build_batch, decode_records
from pykfk.cli.common import (
    CliContext,
    CliError,
    admin_command,
    emit,
    note,
    parse_key_values,
    parse_partitions,
    parse_time_ms,
    pass_cli,
    progress,
)
from pykfk.client.admin import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, AdminClient
from pykfk.client.partitioner import partition_for_key
from pykfk.errors import ErrorCode, KafkaError, error_code
from pykfk.producer import CODECS

ENCODINGS = ["utf8", "base64", "hex", "json"]
Header = tuple[str, bytes | None]
Record = tuple[bytes | None, bytes | None, int | None, list[Header]]


def encode_field(text: Any, encoding: str, what: str) -> bytes | None:
    """A key or value from its text form to bytes; JSON values may be any JSON."""
    if text is None:
        return None
    if encoding == "json":
        return json.dumps(text, separators=(",", ":")).encode() if not isinstance(text, str) \
            else text.encode()
    if not isinstance(text, str):
        text = json.dumps(text, separators=(",", ":"))
    try:
        if encoding == "base64":
            return base64.b64decode(text, validate=True)
        if encoding == "hex":
            return bytes.fromhex(text)
    except (binascii.Error, ValueError):
        raise CliError(f"{what} {text[:40]!r} is not valid {encoding}") from None
    return str(text).encode()


def decode_field(data: bytes | None, encoding: str) -> Any:
    """Bytes to their printable form (the inverse of encode_field)."""
    if data is None:
        return None
    if encoding == "base64":
        return base64.b64encode(data).decode("ascii")
    if encoding == "hex":
        return data.hex()
    text = data.decode("utf-8", "replace")
    if encoding == "json":
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


# ---------------------------------------------------------------------------- produce


def _records_from_lines(lines: Iterator[str], input_format: str, key_separator: str | None,
                        key_encoding: str, value_encoding: str,
                        headers: list[Header]) -> Iterator[tuple[int | None, Record]]:
    """(explicit partition or None, record) for each input line."""
    for lineno, raw in enumerate(lines, 1):
        line = raw.rstrip("\r\n")
        if input_format == "json":
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except ValueError:
                raise CliError(f"input line {lineno} is not JSON: {line[:60]!r}") from None
            if not isinstance(item, dict):
                raise CliError(f"input line {lineno}: expected a JSON object with key/value")
            record_headers = headers + _json_headers(item.get("headers"), lineno)
            yield item.get("partition"), (
                encode_field(item.get("key"), key_encoding, "key"),
                encode_field(item.get("value"), value_encoding, "value"),
                item.get("timestamp"), record_headers)
            continue
        key_text: str | None = None
        if key_separator is not None:
            key_text, sep, line = line.partition(key_separator)
            if not sep:
                raise CliError(f"input line {lineno} has no key separator {key_separator!r}")
        yield None, (encode_field(key_text, key_encoding, "key"),
                     encode_field(line, value_encoding, "value"), None, headers)


def _json_headers(value: Any, lineno: int) -> list[Header]:
    if value is None:
        return []
    pairs = value.items() if isinstance(value, dict) else value
    try:
        return [(str(k), None if v is None else str(v).encode()) for k, v in pairs]
    except (TypeError, ValueError):
        raise CliError(f"input line {lineno}: headers must be an object or [[key, value], ...]") \
            from None


class _Sender:
    """Groups records per partition into batches and sends them to the leaders."""

    def __init__(self, admin: AdminClient, topic: str, acks: int, compression: int):
        self.admin, self.topic, self.acks, self.compression = admin, topic, acks, compression
        self.partitions = sorted(admin.leaders(topic))
        self.pending: dict[int, list[Record]] = {}
        self.round_robin = itertools.cycle(self.partitions)
        self.summary: dict[int, dict[str, int]] = {}
        self.count = 0

    def add(self, partition: int | None, record: Record) -> None:
        if partition is None:
            key = record[0]
            partition = (partition_for_key(key, len(self.partitions)) if key is not None
                         else next(self.round_robin))
        elif partition not in self.partitions:
            raise CliError(f"topic {self.topic!r} has no partition {partition}")
        self.pending.setdefault(partition, []).append(record)
        self.count += 1

    def flush(self) -> None:
        for partition, records in sorted(self.pending.items()):
            batch = build_batch(records, compression=self.compression)
            base = self.admin.produce(self.topic, partition, batch, acks=self.acks)
            entry = self.summary.setdefault(partition, {"records": 0, "first_offset": base})
            entry["records"] += len(records)
            entry["last_offset"] = base + len(records) - 1 if base >= 0 else -1
        self.pending.clear()


@click.command("produce")
@click.argument("topic")
@click.option("--file", "-f", "source", type=click.File("r", encoding="utf-8"), default="-",
              help="Read records from this file [default: stdin].")
@click.option("--input-format", type=click.Choice(["text", "json"]), default="text",
              help="text: a value per line; json: {\"key\", \"value\", \"headers\", "
                   "\"partition\", \"timestamp\"} per line.")
@click.option("--key-separator", "-K", metavar="SEP",
              help="In text lines, the key comes before SEP.")
@click.option("--key-encoding", type=click.Choice(ENCODINGS), default="utf8")
@click.option("--value-encoding", type=click.Choice(ENCODINGS), default="utf8")
@click.option("--header", "-H", "header_items", multiple=True, metavar="KEY=VALUE",
              help="A header for every record. Repeatable.")
@click.option("--partition", "-p", type=click.IntRange(min=0),
              help="Send every record to this partition [default: by key, else round robin].")
@click.option("--acks", type=click.Choice(["all", "1", "0"]), default="all")
@click.option("--compression", type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
              default="none")
@click.option("--batch-records", type=click.IntRange(min=1), default=1000,
              help="Records per request when reading a file or pipe.")
@admin_command
@pass_cli
def produce(cli: CliContext, topic: str, source: IO[str], input_format: str,
            key_separator: str | None, key_encoding: str, value_encoding: str,
            header_items: tuple[str, ...], partition: int | None, acks: str, compression: str,
            batch_records: int) -> None:
    """Write records read from stdin (or --file) to TOPIC, one per line."""
    headers: list[Header] = [(k, v.encode()) for k, v in parse_key_values(header_items, "--header").items()]
    sender = _Sender(cli.admin(), topic, -1 if acks == "all" else int(acks), CODECS[compression])
    # A person typing expects each line sent at once; a pipe is sent in batches.
    interactive = source.isatty()
    for explicit, record in _records_from_lines(iter(source), input_format, key_separator,
                                                key_encoding, value_encoding, headers):
        sender.add(partition if partition is not None else explicit, record)
        if interactive or sum(map(len, sender.pending.values())) >= batch_records:
            sender.flush()
    sender.flush()
    rows = [{"partition": p, **s} for p, s in sorted(sender.summary.items())]
    emit(cli, {"topic": topic, "records": sender.count, "partitions": rows}, rows,
         ["partition", "records", "first_offset", "last_offset"])


# ---------------------------------------------------------------------------- consume


def _start_positions(admin: AdminClient, topic: str, partitions: list[int], offset: str,
                     from_time: str | None) -> dict[int, int]:
    if from_time is not None:
        found = admin.list_offsets(topic, partitions, parse_time_ms(from_time, "--from-time"))
        latest = admin.list_offsets(topic, partitions, LATEST_TIMESTAMP)
        return {p: found[p] if found[p] >= 0 else latest[p] for p in partitions}
    if offset in ("earliest", "latest"):
        stamp = EARLIEST_TIMESTAMP if offset == "earliest" else LATEST_TIMESTAMP
        return admin.list_offsets(topic, partitions, stamp)
    try:
        value = int(offset)
    except ValueError:
        raise click.BadParameter(f"{offset!r} is not earliest, latest, an offset or -N",
                                 param_hint="--offset") from None
    if value >= 0:
        return dict.fromkeys(partitions, value)
    # -N: the last N records of each partition.
    starts = admin.list_offsets(topic, partitions, EARLIEST_TIMESTAMP)
    ends = admin.list_offsets(topic, partitions, LATEST_TIMESTAMP)
    return {p: max(starts[p], ends[p] + value) for p in partitions}


class _Printer:
    def __init__(self, cli: CliContext, topic: str, key_encoding: str, value_encoding: str,
                 print_key: bool, key_separator: str, print_headers: bool):
        self.json, self.topic = cli.json, topic
        self.key_encoding, self.value_encoding = key_encoding, value_encoding
        self.print_key, self.key_separator = print_key, key_separator
        self.print_headers = print_headers

    def line(self, partition: int, record: Any) -> str:
        key = decode_field(record.key, self.key_encoding)
        value = decode_field(record.value, self.value_encoding)
        headers = [[k, decode_field(v, "utf8")] for k, v in record.headers]
        if self.json:
            return json.dumps({"topic": self.topic, "partition": partition,
                               "offset": record.offset, "timestamp": record.timestamp,
                               "key": key, "value": value, "headers": headers})
        parts = []
        if self.print_headers:
            parts.append(",".join(f"{k}={v}" for k, v in headers))
        if self.print_key:
            parts.append(_text(key))
        parts.append(_text(value))
        return self.key_separator.join(parts)


def _text(value: Any) -> str:
    if value is None:
        return "null"
    return value if isinstance(value, str) else json.dumps(value)


class _Consumer:
    """Fetches from each leader in turn and prints records until a stop condition."""

    def __init__(self, admin: AdminClient, topic: str, positions: dict[int, int],
                 printer: _Printer, out: IO[str]):
        self.admin, self.topic, self.positions = admin, topic, positions
        self.printer, self.out = printer, out
        self.max_bytes = dict.fromkeys(positions, 1 << 20)
        self.count = 0

    def poll(self, limit: int | None, ends: dict[int, int] | None) -> int:
        """One fetch round over all leaders; returns how many records were printed."""
        printed = 0
        leaders: dict[int, list[int]] = {}
        for p, leader in self.admin.leaders(self.topic).items():
            if p in self.positions and not (ends is not None and self.positions[p] >= ends[p]):
                leaders.setdefault(leader, []).append(p)
        for leader, parts in leaders.items():
            if leader < 0:
                continue
            wanted = {p: self.positions[p] for p in parts}
            for data in self.admin.fetch(leader, self.topic, wanted,
                                         partition_max_bytes=max(self.max_bytes[p] for p in parts)):
                printed += self._take(data, limit)
                if limit is not None and self.count >= limit:
                    return printed
        return printed

    def _take(self, data: Any, limit: int | None) -> int:
        p = data.partition_index
        if data.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            start = self.admin.list_offsets(self.topic, [p], EARLIEST_TIMESTAMP)[p]
            note(f"partition {p}: offset {self.positions[p]} is out of range; "
                 f"continuing from {start}")
            self.positions[p] = start
            return 0
        if data.error_code:
            raise KafkaError(error_code(data.error_code), f"fetch {self.topic}-{p}")
        records = data.records
        if not records:
            return 0
        decoded = decode_records(records, self.positions[p])
        if len(decoded) == 0 and decoded.next_offset == self.positions[p]:
            # A batch bigger than the fetch size: ask for more next time.
            self.max_bytes[p] *= 2
            return 0
        printed = 0
        for record in decoded:
            if limit is not None and self.count >= limit:
                self.positions[p] = record.offset
                return printed
            self.out.write(self.printer.line(p, record) + "\n")
            self.count += 1
            printed += 1
        self.out.flush()
        self.positions[p] = decoded.next_offset
        return printed


@click.command("consume")
@click.argument("topic")
@click.option("--partition", "-p", "partition_list", metavar="LIST",
              help="Partitions such as 0,2-3 [default: all].")
@click.option("--offset", default="latest", show_default=True,
              metavar="earliest|latest|N|-N",
              help="Where to start: the log start, the end, an offset, or the last N records.")
@click.option("--from-beginning", is_flag=True, help="Same as --offset earliest.")
@click.option("--from-time", metavar="TIME",
              help="Start at the first record at or after TIME (ISO 8601, ms, or -1h style).")
@click.option("--max-messages", "-n", type=click.IntRange(min=1), help="Stop after N records.")
@click.option("--exit-at-end", "-e", is_flag=True,
              help="Stop at the end offsets the partitions had when consuming began.")
@click.option("--idle-timeout", type=click.FloatRange(min=0.1), metavar="SECONDS",
              help="Stop after this long without a record.")
@click.option("--key-encoding", type=click.Choice(ENCODINGS), default="utf8")
@click.option("--value-encoding", type=click.Choice(ENCODINGS), default="utf8")
@click.option("--print-key", is_flag=True, help="Text output: the key before the value.")
@click.option("--print-headers", is_flag=True, help="Text output: headers first.")
@click.option("--key-separator", default="\t", show_default="tab")
@admin_command
@pass_cli
def consume(cli: CliContext, topic: str, partition_list: str | None, offset: str,
            from_beginning: bool, from_time: str | None, max_messages: int | None,
            exit_at_end: bool, idle_timeout: float | None, key_encoding: str,
            value_encoding: str, print_key: bool, print_headers: bool,
            key_separator: str) -> None:
    """Print TOPIC's records: values as text lines, or JSON lines with --format json."""
    admin = cli.admin()
    known = sorted(admin.leaders(topic))
    partitions = parse_partitions(partition_list, "--partition") if partition_list else known
    missing = sorted(set(partitions) - set(known))
    if missing:
        raise CliError(f"topic {topic!r} has no partition {missing[0]}")
    positions = _start_positions(admin, topic, partitions,
                                 "earliest" if from_beginning else offset, from_time)
    ends = admin.list_offsets(topic, partitions, LATEST_TIMESTAMP) if exit_at_end else None
    printer = _Printer(cli, topic, key_encoding, value_encoding, print_key, key_separator,
                       print_headers)
    consumer = _Consumer(admin, topic, positions, printer, sys.stdout)
    try:
        _consume_loop(consumer, max_messages, ends, idle_timeout)
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        # The reader (head, less) went away: not an error.
        sys.stderr.close()
        return
    note(f"consumed {consumer.count} records")


def _consume_loop(consumer: _Consumer, max_messages: int | None, ends: dict[int, int] | None,
                  idle_timeout: float | None) -> None:
    last_record = time.monotonic()
    with progress(max_messages or 0, "consuming", enabled=bool(max_messages)) as advance:
        while True:
            if max_messages is not None and consumer.count >= max_messages:
                return
            if ends is not None and all(consumer.positions[p] >= ends[p] for p in ends):
                return
            printed = consumer.poll(max_messages, ends)
            advance(printed)
            now = time.monotonic()
            if printed:
                last_record = now
            elif idle_timeout is not None and now - last_record >= idle_timeout:
                return


COMMANDS = [produce, consume]
