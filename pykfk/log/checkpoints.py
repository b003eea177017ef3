"""Small files of a log dir: offset checkpoints, meta.properties, the clean-shutdown marker.

Formats follow apache/kafka (``CheckpointFile``, ``OffsetCheckpointFile``,
``BrokerMetadataCheckpoint``) so Kafka's habits and tools apply. Every write is atomic:
write ``<name>.tmp``, fsync it, rename over the old file, fsync the directory; a crash
leaves either the old or the new file, never a torn one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
META_PROPERTIES = "meta.properties"
CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"

# Kafka's OffsetCheckpointFile.CurrentVersion.
CHECKPOINT_VERSION = 0

TopicPartition = tuple[str, int]


class CheckpointError(ValueError):
    """A checkpoint or properties file that cannot be parsed (names the file and line)."""


def fsync_dir(path: str) -> None:
    """Make a rename or unlink in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, data: bytes, *, sync: bool = True) -> None:
    """Replace ``path`` with ``data``: tmp file, fsync, rename, fsync of the directory.

    Unsynced, a file that does not exist yet is written in place: a crash can leave it
    torn where the rename would have left none, and its readers take the two alike (a
    new partition's files, two per partition, whose rename was a tenth of a creation)."""
    if not sync and _write_new(path, data):
        return
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            _write_all(fd, data)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        _remove_quietly(tmp)  # a full disk must not keep the space a failed write took
        raise
    os.replace(tmp, path)
    if sync:
        fsync_dir(os.path.dirname(path) or ".")


def _write_new(path: str, data: bytes) -> bool:
    """Writes ``data`` to ``path`` if no such file exists; False if one does."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    try:
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
    except OSError:
        _remove_quietly(path)  # torn: as if never written
        raise
    return True


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


# Offset checkpoint (recovery-point-offset-checkpoint, replication-offset-checkpoint,
# log-start-offset-checkpoint), text, one item per line:
#
#   0                       version
#   2                       number of entries
#   my-topic 0 1234         topic, partition, offset (single spaces)
#   my-topic 1 98


def write_offset_checkpoint(path: str, offsets: Mapping[TopicPartition, int]) -> None:
    lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
    for (topic, partition), offset in sorted(offsets.items()):
        lines.append(f"{topic} {int(partition)} {int(offset)}")
    write_atomic(path, ("\n".join(lines) + "\n").encode())


def read_offset_checkpoint(path: str) -> dict[TopicPartition, int]:
    """The entries of a checkpoint file; {} when the file does not exist. Raises
    CheckpointError on a malformed file (wrong version, count or line)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return {}
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"{path}: not UTF-8 text ({exc})") from None
    lines = text.splitlines()
    if len(lines) < 2:
        raise CheckpointError(f"{path}: expected a version and a count line")
    if lines[0].strip() != str(CHECKPOINT_VERSION):
        raise CheckpointError(f"{path}: unsupported checkpoint version {lines[0].strip()!r}")
    try:
        count = int(lines[1])
    except ValueError:
        raise CheckpointError(f"{path}: malformed count line {lines[1]!r}") from None
    entries = [line for line in lines[2:] if line.strip()]
    if count != len(entries):
        raise CheckpointError(f"{path}: count says {count} entries, found {len(entries)}")
    offsets: dict[TopicPartition, int] = {}
    for number, line in enumerate(entries, start=3):
        fields = line.split(" ")
        try:
            if len(fields) != 3:
                raise ValueError
            offsets[(fields[0], int(fields[1]))] = int(fields[2])
        except ValueError:
            raise CheckpointError(f"{path}: malformed line {number}: {line!r}") from None
    return offsets


# meta.properties: Java properties text, written by Kafka as
#   #
#   #<date>
#   cluster.id=<id>
#   version=0
#   broker.id=<n>


def write_meta_properties(path: str, props: Mapping[str, str]) -> None:
    lines = ["#", "#" + time.strftime("%a %b %d %H:%M:%S %Z %Y")]
    lines += [f"{key}={value}" for key, value in props.items()]
    write_atomic(path, ("\n".join(lines) + "\n").encode())


def read_meta_properties(path: str) -> dict[str, str] | None:
    """key=value pairs of a properties file (comments skipped); None when it is missing."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"{path}: not UTF-8 text ({exc})") from None
    props = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise CheckpointError(f"{path}: malformed line {number}: {line!r}")
        props[key.strip()] = value.strip()
    return props


def has_clean_shutdown_marker(log_dir: str) -> bool:
    return os.path.exists(os.path.join(log_dir, CLEAN_SHUTDOWN_MARKER))


def write_clean_shutdown_marker(log_dir: str) -> None:
    write_atomic(os.path.join(log_dir, CLEAN_SHUTDOWN_MARKER), b"")


def remove_clean_shutdown_marker(log_dir: str) -> None:
    """Called once the logs are loaded: a crash from now on must trigger recovery."""
    try:
        os.unlink(os.path.join(log_dir, CLEAN_SHUTDOWN_MARKER))
    except FileNotFoundError:
        return
    fsync_dir(log_dir)

