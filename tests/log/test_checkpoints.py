"""Offset checkpoints and meta.properties: Kafka's text formats, atomic replacement."""

from __future__ import annotations

import os

import pytest

from pykfk.log.checkpoints import (
    CheckpointError,
    read_meta_properties,
    read_offset_checkpoint,
    write_atomic,
    write_meta_properties,
    write_offset_checkpoint,
)


def test_offset_checkpoint_round_trip_in_kafka_format(tmp_path):
    path = str(tmp_path / "recovery-point-offset-checkpoint")
    offsets = {("orders", 0): 1234, ("orders", 1): 0, ("my.topic_with-dash", 17): 2**40}
    write_offset_checkpoint(path, offsets)
    assert read_offset_checkpoint(path) == offsets
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == (
        "0\n3\nmy.topic_with-dash 17 1099511627776\norders 0 1234\norders 1 0\n")
    assert [p.name for p in tmp_path.iterdir()] == ["recovery-point-offset-checkpoint"]
    write_offset_checkpoint(path, {})
    assert read_offset_checkpoint(path) == {}
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == "0\n0\n"


def test_missing_checkpoint_is_empty(tmp_path):
    assert read_offset_checkpoint(str(tmp_path / "nope")) == {}


@pytest.mark.parametrize("text", [
    "", "0\n", "1\n0\n", "0\n2\nt 0 1\n", "0\n1\nt 0\n", "0\n1\nt x 1\n", "0\nx\n",
    "0\n1\nt 0 1 2\n", "\xff\xfe",
])
def test_malformed_checkpoints_are_refused(tmp_path, text):
    path = tmp_path / "cp"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(CheckpointError, match="cp"):
        read_offset_checkpoint(str(path))


def test_a_leftover_tmp_file_does_not_matter(tmp_path):
    path = str(tmp_path / "cp")
    write_offset_checkpoint(path, {("t", 0): 1})
    (tmp_path / "cp.tmp").write_text("0\n1\nt 0 99")  # a crash mid-write of the next one
    assert read_offset_checkpoint(path) == {("t", 0): 1}
    write_offset_checkpoint(path, {("t", 0): 2})
    assert read_offset_checkpoint(path) == {("t", 0): 2}
    assert not (tmp_path / "cp.tmp").exists()


def test_meta_properties(tmp_path):
    path = str(tmp_path / "meta.properties")
    assert read_meta_properties(path) is None
    write_meta_properties(path, {"cluster.id": "abc-123", "version": "0", "broker.id": "5"})
    text = (tmp_path / "meta.properties").read_text()
    assert text.startswith("#\n#") and "broker.id=5\n" in text
    assert read_meta_properties(path) == {"cluster.id": "abc-123", "version": "0", "broker.id": "5"}
    (tmp_path / "meta.properties").write_text("# comment\nbroker.id = 7\n\nno equals\n")
    with pytest.raises(CheckpointError):
        read_meta_properties(path)


def test_unsynced_writes_make_a_new_file_in_place_and_replace_an_old_one_whole(tmp_path, monkeypatch):
    path = tmp_path / "leader-epoch-checkpoint"
    renames = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (renames.append(b), real_replace(a, b)))
    write_atomic(str(path), b"0\n1\n0 0\n", sync=False)
    assert path.read_bytes() == b"0\n1\n0 0\n" and renames == []  # no file yet: written in place
    write_atomic(str(path), b"0\n1\n3 7\n", sync=False)
    assert path.read_bytes() == b"0\n1\n3 7\n" and renames == [str(path)]  # replaced through a tmp file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["leader-epoch-checkpoint"]

