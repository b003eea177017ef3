"""``pykfk log dump`` on segment files a broker wrote: a clean segment checks out
(batches, offsets, CRCs, index entries); a flipped byte, a torn batch and a bad index
entry are each found and reported with exit 1."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import time
from pathlib import Path

import pytest

from pykfk._core.records import build_batch
from pykfk.testing import BrokerProcess

from .conftest import Pykfk, on_terminal

BATCHES = 20
RECORDS_PER_BATCH = 5
SEGMENT = "00000000000000000000"


@pytest.fixture
def segment_dir(pykfk: Pykfk, broker: BrokerProcess, topic_name: str, tmp_path: Path) -> Path:
    """A copy of a partition directory with 20 batches of ~2.5 KB (so the sparse
    indexes have entries)."""
    pykfk.ok("topic", "create", topic_name, "-p", "1")
    lines = "".join(f"{i:04d}-" + "x" * 500 + "\n" for i in range(BATCHES * RECORDS_PER_BATCH))
    pykfk.ok("produce", topic_name, "--batch-records", str(RECORDS_PER_BATCH), input=lines)
    copy = tmp_path / "partition"
    shutil.copytree(Path(broker.log_dir) / f"{topic_name}-0", copy)
    return copy


def _batch_positions(log: Path) -> list[int]:
    data = log.read_bytes()
    positions, pos = [], 0
    while pos < len(data):
        positions.append(pos)
        pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
    return positions


def test_clean_segment_checks_out(pykfk: Pykfk, segment_dir: Path) -> None:
    result = pykfk.ok("log", "dump", str(segment_dir), "-o", "json")
    report = result.json()
    assert report["ok"] is True and report["problems"] == 0
    files = {Path(f["path"]).name: f for f in report["files"]}
    batches = files[f"{SEGMENT}.log"]["batches"]
    assert len(batches) == BATCHES
    assert [b["base_offset"] for b in batches] == list(range(0, BATCHES * RECORDS_PER_BATCH,
                                                              RECORDS_PER_BATCH))
    assert all(b["valid"] and b["crc"] == b["computed_crc"] for b in batches)
    assert all(b["count"] == RECORDS_PER_BATCH for b in batches)
    entries = files[f"{SEGMENT}.index"]["entries"]
    assert entries, "the broker wrote no offset index entries"
    positions = {b["position"] for b in batches}
    assert all(e["position"] in positions for e in entries)

    text = pykfk.ok("log", "dump", str(segment_dir / f"{SEGMENT}.log"), "--records").out
    assert "CRC" in text and "| offset: 99 " in text and "PROBLEM" not in text


def test_flipped_byte_is_found_as_a_corrupt_batch(pykfk: Pykfk, segment_dir: Path) -> None:
    log = segment_dir / f"{SEGMENT}.log"
    third = _batch_positions(log)[2]
    with open(log, "r+b") as f:  # one bit of one record value, deep inside batch 3
        f.seek(third + 200)
        byte = f.read(1)[0]
        f.seek(third + 200)
        f.write(bytes([byte ^ 0x01]))

    result = pykfk("log", "dump", str(log), "-o", "json")
    assert result.code == 1, result
    assert "1 problem found" in result.err
    report = result.json()
    [log_report] = [f for f in report["files"] if f["kind"] == "log"]
    bad = [b for b in log_report["batches"] if not b["valid"]]
    assert [(b["position"], b["base_offset"]) for b in bad] == [(third, 2 * RECORDS_PER_BATCH)]
    assert bad[0]["crc"] != bad[0]["computed_crc"]
    assert len(log_report["batches"]) == BATCHES  # the walk goes on past a bad CRC
    assert "CRC-32C mismatch" in log_report["problems"][0]

    text = pykfk("log", "dump", str(segment_dir))
    assert text.code == 1
    assert f"PROBLEM: position {third} (base offset {2 * RECORDS_PER_BATCH}): CRC-32C mismatch" \
        in text.out


def test_torn_tail_and_bad_index_entry_are_reported(pykfk: Pykfk, segment_dir: Path) -> None:
    log = segment_dir / f"{SEGMENT}.log"
    last = _batch_positions(log)[-1]
    os.truncate(log, last + 30)  # a crash in the middle of the last batch
    index = segment_dir / f"{SEGMENT}.index"
    with open(index, "r+b") as f:
        relative, position = struct.unpack(">ii", f.read(8))
        f.seek(0)
        f.write(struct.pack(">ii", relative, position + 1))

    result = pykfk("log", "dump", str(segment_dir), "-o", "json")
    assert result.code == 1, result
    problems = [p for f in result.json()["files"] for p in f["problems"]]
    assert any(f"position {last}: 30 trailing bytes" in p or f"position {last}: batch length" in p
               for p in problems), problems
    assert any(f"entry 0: position {position + 1} is not the start of a batch" in p
               for p in problems), problems


def test_bad_paths(pykfk: Pykfk, tmp_path: Path) -> None:
    missing = pykfk("log", "dump", str(tmp_path / "nope.log"))
    assert missing.code == 2 and "does not exist" in missing.err
    empty_dir = pykfk("log", "dump", str(tmp_path))
    assert empty_dir.code == 1 and "no .log segment files" in empty_dir.err
    stray = tmp_path / "notes.log"
    stray.write_text("hello")
    named = pykfk("log", "dump", str(stray))
    assert named.code == 1 and "not a segment file" in named.err


def test_print_data_log_with_headers_and_an_offset_range(pykfk: Pykfk, broker: BrokerProcess,
                                                         topic_name: str) -> None:
    pykfk.ok("topic", "create", topic_name, "-p", "1")
    records = "".join(
        json.dumps({"key": f"k{i}", "value": f"v{i}", "timestamp": 1000 + i,
                    "headers": {"trace": f"t-{i}", "src": "import"}}) + "\n" for i in range(6))
    pykfk.ok("produce", topic_name, "--input-format", "json", "--batch-records", "2",
             input=records)
    partition = str(Path(broker.log_dir) / f"{topic_name}-0")

    # kafka-dump-log.sh's --print-data-log: a line per record, headers as key=value.
    text = pykfk.ok("log", "dump", partition, "--print-data-log", "--start-offset", "3",
                    "--end-offset", "4").out
    record_lines = [line for line in text.splitlines() if line.startswith("| offset:")]
    assert record_lines == [
        f"| offset: {i} CreateTime: {1000 + i} keySize: 2 valueSize: 2 headerKeys: [trace,src] "
        f"key: k{i} payload: v{i} headers: [trace=t-{i},src=import]" for i in (3, 4)]
    # Only the batches holding offsets 3-4 are listed (2-3 and 4-5); all are checked.
    assert re.findall(r"^\d+\s+(\d+)\s+(\d+)\s+2\s", text, re.MULTILINE) == [("2", "3"), ("4", "5")]

    deep = pykfk.ok("log", "dump", partition, "--deep-iteration", "--end-offset", "0").out
    assert [line for line in deep.splitlines() if line.startswith("|")] == [
        "| offset: 0 CreateTime: 1000 keySize: 2 valueSize: 2 headerKeys: [trace,src]"]

    report = pykfk.ok("log", "dump", partition, "-r", "--start-offset", "5", "-o", "json").json()
    [log] = [f for f in report["files"] if f["kind"] == "log"]
    assert [r["headers"] for b in log["batches"] for r in b["records"]] == [
        [["trace", "t-5"], ["src", "import"]]]
    backwards = pykfk("log", "dump", partition, "--start-offset", "4", "--end-offset", "3")
    assert backwards.code == 2 and "--end-offset" in backwards.err


def test_timestamps_are_labelled_create_time_or_log_append_time(pykfk: Pykfk, broker: BrokerProcess,
                                                                topic_name: str) -> None:
    """As kafka-dump-log.sh: ``CreateTime: T`` for the producer's time, ``LogAppendTime: T``
    for a topic whose broker stamps the batches (every record then carries that time)."""
    stamped = f"{topic_name}-append"
    pykfk.ok("topic", "create", topic_name, "-p", "1")
    pykfk.ok("topic", "create", stamped, "-p", "1", "-c", "message.timestamp.type=LogAppendTime")
    records = "".join(json.dumps({"value": f"v{i}", "timestamp": 1000 + i}) + "\n" for i in range(3))
    before = int(time.time() * 1000)
    for topic in (topic_name, stamped):
        pykfk.ok("produce", topic, "--input-format", "json", input=records)
    after = int(time.time() * 1000)

    created = pykfk.ok("log", "dump", str(Path(broker.log_dir) / f"{topic_name}-0"), "--deep-iteration").out
    assert re.findall(r"^\| offset: (\d) (\w+): (\d+) ", created, re.MULTILINE) == [
        (str(i), "CreateTime", str(1000 + i)) for i in range(3)]
    assert re.search(r"^\d+\s+0\s+2\s+3\s+\d+\s+\S+\s+none\s+CreateTime\s", created, re.MULTILINE), created

    appended = pykfk.ok("log", "dump", str(Path(broker.log_dir) / f"{stamped}-0"), "--deep-iteration").out
    lines = re.findall(r"^\| offset: (\d) (\w+): (\d+) ", appended, re.MULTILINE)
    assert [(o, kind) for o, kind, _ in lines] == [(str(i), "LogAppendTime") for i in range(3)]
    assert len({t for _, _, t in lines}) == 1 and before <= int(lines[0][2]) <= after, lines
    assert re.search(r"\snone\s+LogAppendTime\s", appended), appended
    report = pykfk.ok("log", "dump", str(Path(broker.log_dir) / f"{stamped}-0"), "-r", "-o", "json").json()
    [log] = [f for f in report["files"] if f["kind"] == "log"]
    assert {(b["timestamp_type"], r["timestamp_type"]) for b in log["batches"] for r in b["records"]} == {
        ("LogAppendTime", "LogAppendTime")}


def test_large_segment_shows_progress_on_a_terminal(tmp_path: Path) -> None:
    log = tmp_path / f"{SEGMENT}.log"
    value = b"v" * (1 << 20)
    # 33 MiB: above the size that gets a progress bar.
    log.write_bytes(b"".join(build_batch([(None, value, 1000, [])], base_offset=offset)
                             for offset in range(33)))
    shown = on_terminal(Pykfk(None), "log", "dump", str(log))
    assert shown.code == 0, shown
    assert re.search(rf"{SEGMENT}\.log\s+\[#+\]\s+100%", shown.err), shown.err
    assert len(re.findall(r"^\d+\s+\d+\s+\d+\s+1\s", shown.out, re.MULTILINE)) == 33
    piped = Pykfk(None).ok("log", "dump", str(log))
    assert "%" not in piped.err
