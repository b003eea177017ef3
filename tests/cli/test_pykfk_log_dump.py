"""``pykfk log dump`` on segment files a broker wrote: a clean segment checks out
(batches, offsets, CRCs, index entries); a flipped byte, a torn batch and a bad index
entry are each found and reported with exit 1."""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

import pytest

from pykfk.testing import BrokerProcess

from .conftest import Pykfk

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
