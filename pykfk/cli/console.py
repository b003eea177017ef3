"""``pykfk produce`` and ``pykfk consume``: records from stdin to a topic and back,
as plain lines or JSON lines, with keys, headers and binary-safe encodings."""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import re
import sys
import time
import types
from collections.abc import Iterator
from typing import IO, Any

import click

from pykfk._core.records import build_batch, decode_records
from pykfk.cli.common import (
    CliContext,
    CliError,
    admin_command,
    complete_topics,
    emit,
    note,
    parse_key_values,
    parse_partitions,
    parse_time_ms,
    pass_cli,
    progress,
)
from pykfk.client.admin import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, AdminClient
from pykfk.client.connection import BrokerConnection
from pykfk.client.group_member import BrokerGroupMembership
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
@click.argument("topic", shell_complete=complete_topics)
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


ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}


def _start_positions(admin: AdminClient, topic: str, partitions: list[int], offset: str,
                     from_time: str | None) -> dict[int, int]:
    if from_time is not None:
        return _positions_at(admin, topic, partitions, parse_time_ms(from_time, "--from-time"))
    if offset.startswith("@"):
        return _positions_at(admin, topic, partitions, parse_time_ms(offset[1:], "--offset"))
    if offset in ("earliest", "latest"):
        stamp = EARLIEST_TIMESTAMP if offset == "earliest" else LATEST_TIMESTAMP
        return admin.list_offsets(topic, partitions, stamp)
    try:
        value = int(offset)
    except ValueError:
        raise click.BadParameter(f"{offset!r} is not earliest, latest, an offset, -N or @TIME",
                                 param_hint="--offset") from None
    if value >= 0:
        return dict.fromkeys(partitions, value)
    # -N: the last N records of each partition.
    starts = admin.list_offsets(topic, partitions, EARLIEST_TIMESTAMP)
    ends = admin.list_offsets(topic, partitions, LATEST_TIMESTAMP)
    return {p: max(starts[p], ends[p] + value) for p in partitions}


def _positions_at(admin: AdminClient, topic: str, partitions: list[int],
                  timestamp: int) -> dict[int, int]:
    """The first offset at or after ``timestamp``; the end where no record is that recent."""
    found = admin.list_offsets(topic, partitions, timestamp)
    latest = admin.list_offsets(topic, partitions, LATEST_TIMESTAMP)
    return {p: found[p] if found[p] >= 0 else latest[p] for p in partitions}


# kcat's -f format: %t topic, %p partition, %o offset, %T timestamp (ms), %k key, %s value,
# %K / %S key / value size (-1 for null), %h headers (k=v,...), %% a percent sign;
# \n, \t, \\ escapes. Nothing is added: end the format with \n for a line per record.
_FORMAT_TOKEN = re.compile(r"%[tpoTkKsSh%]|\\[nt\\]")


class _Printer:
    def __init__(self, cli: CliContext, topic: str, key_encoding: str, value_encoding: str,
                 print_key: bool, key_separator: str, print_headers: bool,
                 print_format: str | None = None):
        self.json, self.topic = cli.json, topic
        self.key_encoding, self.value_encoding = key_encoding, value_encoding
        self.print_key, self.key_separator = print_key, key_separator
        self.print_headers = print_headers
        self.print_format = print_format

    def text(self, partition: int, record: Any) -> str:
        """What one record prints as, with its line end."""
        key = decode_field(record.key, self.key_encoding)
        value = decode_field(record.value, self.value_encoding)
        headers = [[k, decode_field(v, "utf8")] for k, v in record.headers]
        if self.json:
            return json.dumps({"topic": self.topic, "partition": partition,
                               "offset": record.offset, "timestamp": record.timestamp,
                               "key": key, "value": value, "headers": headers}) + "\n"
        if self.print_format is not None:
            fields = {
                "%t": self.topic, "%p": str(partition), "%o": str(record.offset),
                "%T": str(record.timestamp), "%k": _text(key), "%s": _text(value),
                "%K": str(-1 if record.key is None else len(record.key)),
                "%S": str(-1 if record.value is None else len(record.value)),
                "%h": _headers_text(headers), "%%": "%", "\\n": "\n", "\\t": "\t", "\\\\": "\\",
            }
            return _FORMAT_TOKEN.sub(lambda m: fields[m.group(0)], self.print_format)
        parts = []
        if self.print_headers:
            parts.append(_headers_text(headers))
        if self.print_key:
            parts.append(_text(key))
        parts.append(_text(value))
        return self.key_separator.join(parts) + "\n"


def _headers_text(headers: list[list[Any]]) -> str:
    return ",".join(f"{k}={_text(v)}" for k, v in headers)


def _text(value: Any) -> str:
    if value is None:
        return "null"
    return value if isinstance(value, str) else json.dumps(value)


class _Consumer:
    """Fetches from each leader in turn and prints records until a stop condition."""

    def __init__(self, admin: AdminClient, topic: str, positions: dict[int, int],
                 printer: _Printer, out: IO[str], isolation_level: int = 0):
        self.admin, self.topic = admin, topic
        self.printer, self.out = printer, out
        self.isolation_level = isolation_level
        self.positions: dict[int, int] = {}
        self.max_bytes: dict[int, int] = {}
        self.assign(positions)
        self.count = 0

    def assign(self, positions: dict[int, int]) -> None:
        self.positions = dict(positions)
        self.max_bytes = dict.fromkeys(positions, 1 << 20)

    def poll(self, limit: int | None, ends: dict[int, int] | None) -> int:
        """One fetch round over all leaders; returns how many records were printed."""
        printed = 0
        leaders: dict[int, list[int]] = {}
        for p, leader in self.admin.leaders(self.topic).items():
            if p in self.positions and not (ends is not None and self.positions[p] >= ends[p]):
                leaders.setdefault(leader, []).append(p)
        if not leaders:
            time.sleep(0.2)  # nothing assigned (yet): do not spin
        for leader, parts in leaders.items():
            if leader < 0:
                continue
            wanted = {p: self.positions[p] for p in parts}
            for data in self.admin.fetch(leader, self.topic, wanted,
                                         partition_max_bytes=max(self.max_bytes[p] for p in parts),
                                         isolation_level=self.isolation_level):
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
        committed_only = self.isolation_level == 1
        decoded = decode_records(records, self.positions[p], include_control=committed_only)
        if len(decoded) == 0 and decoded.next_offset == self.positions[p]:
            # A batch bigger than the fetch size: ask for more next time.
            self.max_bytes[p] *= 2
            return 0
        hidden = _aborted_batches(decoded, data.aborted_transactions) if committed_only else set()
        printed = 0
        for i, record in enumerate(decoded):
            if limit is not None and self.count >= limit:
                self.positions[p] = record.offset
                return printed
            if decoded.batch_index[i] in hidden:
                continue
            self.out.write(self.printer.text(p, record))
            self.count += 1
            printed += 1
        self.out.flush()
        self.positions[p] = decoded.next_offset
        return printed


def _aborted_batches(decoded: Any, aborted: Any) -> set[int]:
    """Indexes of the batches a read_committed consumer does not show: control batches
    (commit and abort markers) and the batches of aborted transactions. A transaction of
    the aborted list starts at its first offset and ends at its producer's abort marker
    (Kafka's consumer rule)."""
    pending = sorted(((a.first_offset, a.producer_id) for a in aborted or []), reverse=True)
    active: set[int] = set()
    hidden = set()
    for i, batch in enumerate(decoded.batches):
        last = batch.base_offset + batch.last_offset_delta
        while pending and pending[-1][0] <= last:
            active.add(pending.pop()[1])
        if batch.is_control:
            hidden.add(i)
            active.discard(batch.producer_id)
        elif batch.is_transactional and batch.producer_id in active:
            hidden.add(i)
    return hidden


class _ConsoleMembership(BrokerGroupMembership):
    """The console consumer as a member of a consumer group (JoinGroup/SyncGroup with
    the range assignor, Heartbeat, OffsetCommit, LeaveGroup), through the CLI's admin
    client so --command-config security applies."""

    def __init__(self, admin: AdminClient, group: str):
        super().__init__(_AdminTopics(admin), group,  # type: ignore[arg-type]
                         session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
                         timeout_ms=int(admin.timeout * 1000),
                         client_id="pykfk-console-consumer")
        self.admin = admin

    def coordinator(self) -> BrokerConnection:
        self._coordinator = self.admin.coordinator(self.group_id)
        return self._coordinator

    def _lost_coordinator(self) -> None:
        self.admin.forget_coordinator(self.group_id)
        self._coordinator = None


class _AdminTopics:
    """What the group leader's range assignment reads: each topic's partitions."""

    def __init__(self, admin: AdminClient):
        self.admin = admin
        self.topics: dict[str, Any] = {}

    def refresh(self, topics: list[str]) -> None:
        for info in self.admin.describe_topics(topics):
            self.topics[info.name] = types.SimpleNamespace(
                partitions=[p.partition for p in info.partitions])


class _GroupSession:
    """Membership, starting positions from the group's committed offsets (else the
    --offset reset), heartbeats, and commits: every 5 s, before a rebalance, at exit."""

    COMMIT_INTERVAL = 5.0
    HEARTBEAT_INTERVAL = 1.0

    def __init__(self, admin: AdminClient, group: str, topic: str, reset: str):
        self.member = _ConsoleMembership(admin, group)
        self.admin, self.topic, self.reset = admin, topic, reset
        self.committed: dict[int, int] = {}
        self.last_commit = self.last_heartbeat = time.monotonic()

    def join(self) -> dict[int, int]:
        """Join; the positions of the partitions assigned to this member."""
        assigned = [p for t, p in self.member.join([self.topic]) if t == self.topic]
        committed = self.member.fetch_offsets([(self.topic, p) for p in assigned]) if assigned else {}
        self.committed = {p: committed[(self.topic, p)] for p in assigned
                          if committed.get((self.topic, p), -1) >= 0}
        missing = [p for p in assigned if p not in self.committed]
        positions = dict(self.committed)
        if missing:
            positions.update(_start_positions(self.admin, self.topic, missing, self.reset, None))
        note(f"group {self.member.group_id}: member {self.member.member_id}, generation "
             f"{self.member.generation_id}, partitions {','.join(map(str, assigned)) or 'none'}")
        return positions

    def tick(self, consumer: _Consumer) -> bool:
        """Heartbeat and commit when due; True when the group rebalances (join again)."""
        now = time.monotonic()
        if now - self.last_commit >= self.COMMIT_INTERVAL:
            self.commit(consumer.positions)
        if now - self.last_heartbeat < self.HEARTBEAT_INTERVAL:
            return False
        self.last_heartbeat = now
        if not self.member.heartbeat():
            return False
        self.commit(consumer.positions, quiet=True)
        return True

    def commit(self, positions: dict[int, int], *, quiet: bool = False) -> None:
        self.last_commit = time.monotonic()
        changed = {(self.topic, p): o for p, o in positions.items() if self.committed.get(p) != o}
        if not changed:
            return
        try:
            self.member.commit(changed)
        except KafkaError as exc:
            if not quiet:
                note(f"commit for group {self.member.group_id} failed: {exc.code.name}")
            return
        self.committed.update({p: o for (_t, p), o in changed.items()})

    def close(self, positions: dict[int, int]) -> None:
        self.commit(positions)
        self.member.leave()


@click.command("consume")
@click.argument("topic", shell_complete=complete_topics)
@click.option("--group", "-g", metavar="GROUP",
              help="Consume as a member of GROUP: share the partitions with its other members, "
                   "start at its committed offsets, and commit (every 5 s and at exit).")
@click.option("--partition", "-p", "partition_list", metavar="LIST",
              help="Partitions such as 0,2-3 [default: all].")
@click.option("--offset", default="latest", show_default=True,
              metavar="earliest|latest|N|-N|@TIME",
              help="Where to start: the log start, the end, an offset, the last N records, or "
                   "the first record at or after TIME (@2024-05-01T12:00:00Z, @ms, @-1h). With "
                   "--group: where partitions without a committed offset start.")
@click.option("--from-beginning", is_flag=True, help="Same as --offset earliest.")
@click.option("--from-time", metavar="TIME",
              help="Start at the first record at or after TIME (ISO 8601, ms, or -1h style).")
@click.option("--isolation-level", type=click.Choice(sorted(ISOLATION_LEVELS)),
              default="read_uncommitted", show_default=True,
              help="read_committed: only committed transactional records, up to the last "
                   "stable offset.")
@click.option("--max-messages", "-n", type=click.IntRange(min=1), help="Stop after N records.")
@click.option("--exit-at-end", "-e", is_flag=True,
              help="Stop at the end offsets the partitions had when consuming began.")
@click.option("--idle-timeout", type=click.FloatRange(min=0.1), metavar="SECONDS",
              help="Stop after this long without a record.")
@click.option("--key-encoding", type=click.Choice(ENCODINGS), default="utf8")
@click.option("--value-encoding", type=click.Choice(ENCODINGS), default="utf8")
@click.option("--print-format", "-f", metavar="FORMAT",
              help="Text output as kcat's -f: %t topic, %p partition, %o offset, %T timestamp "
                   "(ms), %k key, %s value, %K/%S key/value size, %h headers (k=v,...), %%; "
                   "\\n and \\t escapes. Example: -f '%p:%o %T %k=%s %h\\n'.")
@click.option("--print-key", is_flag=True, help="Text output: the key before the value.")
@click.option("--print-headers", is_flag=True, help="Text output: headers first.")
@click.option("--key-separator", default="\t", show_default="tab")
@admin_command
@pass_cli
def consume(cli: CliContext, topic: str, group: str | None, partition_list: str | None,
            offset: str, from_beginning: bool, from_time: str | None, isolation_level: str,
            max_messages: int | None, exit_at_end: bool, idle_timeout: float | None,
            key_encoding: str, value_encoding: str, print_format: str | None, print_key: bool,
            print_headers: bool, key_separator: str) -> None:
    """Print TOPIC's records: values as text lines (or --print-format), or JSON lines with
    --format json."""
    if group is not None and (partition_list or from_time):
        raise click.UsageError("--group takes the partitions the group assigns; leave out "
                               "--partition and --from-time (use --offset @TIME for new partitions)")
    admin = cli.admin()
    known = sorted(admin.leaders(topic))
    partitions = parse_partitions(partition_list, "--partition") if partition_list else known
    missing = sorted(set(partitions) - set(known))
    if missing:
        raise CliError(f"topic {topic!r} has no partition {missing[0]}")
    isolation = ISOLATION_LEVELS[isolation_level]
    start = "earliest" if from_beginning else offset
    printer = _Printer(cli, topic, key_encoding, value_encoding, print_key, key_separator,
                       print_headers, print_format)
    session = _GroupSession(admin, group, topic, start) if group is not None else None
    positions = session.join() if session else _start_positions(admin, topic, partitions, start,
                                                                from_time)
    consumer = _Consumer(admin, topic, positions, printer, sys.stdout, isolation)
    try:
        _consume_loop(consumer, max_messages, exit_at_end, idle_timeout, session)
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        # The reader (head, less) went away: not an error.
        sys.stderr.close()
        return
    finally:
        if session is not None:
            session.close(consumer.positions)
    note(f"consumed {consumer.count} records")


def _end_offsets(consumer: _Consumer) -> dict[int, int]:
    partitions = sorted(consumer.positions)
    if not partitions:
        return {}
    return consumer.admin.list_offsets(consumer.topic, partitions, LATEST_TIMESTAMP,
                                       isolation_level=consumer.isolation_level)


def _consume_loop(consumer: _Consumer, max_messages: int | None, exit_at_end: bool,
                  idle_timeout: float | None, session: _GroupSession | None) -> None:
    last_record = time.monotonic()
    ends = _end_offsets(consumer) if exit_at_end else None
    # The bar is for records going to a file or a pipe: on the terminal they show themselves.
    with progress(max_messages or 0, "consuming",
                  enabled=bool(max_messages) and not consumer.out.isatty()) as advance:
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
            if session is not None and session.tick(consumer):
                consumer.assign(session.join())
                ends = _end_offsets(consumer) if exit_at_end else None


COMMANDS = [produce, consume]
