"""The follower's side of an incremental fetch session, with no I/O: what each request
names and forgets, and how refusals and lost sessions start over."""

from __future__ import annotations

from pykfk.cluster.fetch_session import FollowerFetchSession
from pykfk.errors import ErrorCode


def _fields(offset: int) -> dict[str, int]:
    return {"current_leader_epoch": 3, "fetch_offset": offset, "log_start_offset": 0, "partition_max_bytes": 1024}


def _named(request: dict) -> dict[tuple[str, int], int]:
    return {(t["topic"], p["partition"]): p["fetch_offset"] for t in request["topics"] for p in t["partitions"]}


def test_a_session_names_only_what_changed_and_forgets_what_is_gone():
    session = FollowerFetchSession()
    first = session.request_fields({("t", 0): _fields(5), ("t", 1): _fields(7), ("u", 0): _fields(1)})
    assert (first["session_id"], first["session_epoch"]) == (0, 0)
    assert _named(first) == {("t", 0): 5, ("t", 1): 7, ("u", 0): 1}
    session.answered(ErrorCode.NONE, 99)

    second = session.request_fields({("t", 0): _fields(5), ("t", 1): _fields(9), ("u", 0): _fields(1)})
    assert (second["session_id"], second["session_epoch"]) == (99, 1)
    assert _named(second) == {("t", 1): 9} and second["forgotten_topics_data"] == []
    session.answered(ErrorCode.NONE, 99)

    third = session.request_fields({("t", 1): _fields(9)})  # t-0 paused, u-0 moved away
    assert (third["session_epoch"], _named(third)) == (2, {})
    assert sorted((f["topic"], f["partitions"]) for f in third["forgotten_topics_data"]) == [("t", [0]), ("u", [0])]


def test_refusals_and_sessionless_answers_start_over_with_a_full_fetch():
    session = FollowerFetchSession()
    session.request_fields({("t", 0): _fields(1)})
    session.answered(ErrorCode.NONE, 7)
    session.request_fields({("t", 0): _fields(2)})
    session.answered(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0)
    again = session.request_fields({("t", 0): _fields(2), ("t", 1): _fields(0)})
    assert (again["session_id"], again["session_epoch"]) == (0, 0) and len(_named(again)) == 2
    session.answered(ErrorCode.NONE, 0)  # the leader had no slot: no session
    assert session.request_fields({("t", 0): _fields(2)})["session_id"] == 0
    session.answered(ErrorCode.NONE, 8)
    session.request_fields({("t", 0): _fields(3)})
    session.reset()  # a lost connection
    assert session.request_fields({("t", 0): _fields(3)})["session_epoch"] == 0
