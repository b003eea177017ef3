"""Share-group membership, the simple assignor, share sessions and the limits that keep
a broker's memory bounded, without I/O."""

from pykfk.errors import ErrorCode
from pykfk.group.share.coordinator import ShareCoordinator, ShareSettings, simple_assignment

TOPICS = {"one": 1, "four": 4}


def test_the_simple_assignor_shares_few_partitions_and_spreads_many():
    assert simple_assignment({"a": ["one"], "b": ["one"], "c": ["one"]}, TOPICS) == {
        "a": {"one": [0]}, "b": {"one": [0]}, "c": {"one": [0]}}
    spread = simple_assignment({"a": ["four"], "b": ["four"]}, TOPICS)
    assert spread == {"a": {"four": [0, 2]}, "b": {"four": [1, 3]}}
    assert simple_assignment({"a": ["none"]}, TOPICS) == {"a": {}}


def test_epochs_fencing_and_leaving():
    share = ShareCoordinator(ShareSettings(session_timeout_ms=1000))
    first = share.heartbeat("g", "a", 0, ["one"], TOPICS, now_ms=0)
    assert (first.error, first.epoch, first.assignment) == (ErrorCode.NONE, 1, {"one": [0]})
    second = share.heartbeat("g", "b", 0, ["one"], TOPICS, now_ms=0)
    assert second.epoch == 2
    # a's epoch moves to the group's at its next heartbeat; a stale one is fenced after that
    assert share.heartbeat("g", "a", 1, None, TOPICS, now_ms=10).epoch == 2
    assert share.heartbeat("g", "a", 1, None, TOPICS, now_ms=10).error == ErrorCode.FENCED_MEMBER_EPOCH
    assert share.heartbeat("g", "zz", 2, None, TOPICS, now_ms=10).error == ErrorCode.UNKNOWN_MEMBER_ID
    assert share.heartbeat("g", "", 0, ["one"], TOPICS, now_ms=10).error == ErrorCode.INVALID_REQUEST
    # b is not heard from within the session timeout: fenced
    assert share.heartbeat("g", "a", 2, None, TOPICS, now_ms=900).error == ErrorCode.NONE
    assert share.heartbeat("g", "a", 2, None, TOPICS, now_ms=1500).epoch == 3
    assert list(share.groups["g"].members) == ["a"]
    assert share.heartbeat("g", "a", -1, None, TOPICS, now_ms=1600).epoch == -1
    assert share.groups["g"].state == "Empty"


def test_share_session_epochs():
    share = ShareCoordinator(ShareSettings())
    assert share.session("g", "m", 1) == ErrorCode.SHARE_SESSION_NOT_FOUND
    assert share.session("g", "m", 0, acknowledge_only=True) == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    session = share.session("g", "m", 0, [("one", 0)])
    assert not isinstance(session, int) and session.epoch == 1
    assert share.session("g", "m", 5) == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert share.session("g", "m", 1, [("four", 2)], [("one", 0)]) is session
    assert session.partitions == {("four", 2)} and session.epoch == 2
    assert share.session("g", "m", -1) is session
    assert share.session("g", "m", 2) == ErrorCode.SHARE_SESSION_NOT_FOUND


def test_groups_and_sessions_are_bounded():
    share = ShareCoordinator(ShareSettings(max_size=2, max_groups=2))
    assert share.heartbeat("g1", "a", 0, ["one"], TOPICS, now_ms=0).error == ErrorCode.NONE
    assert share.heartbeat("g2", "a", 0, ["one"], TOPICS, now_ms=0).error == ErrorCode.NONE
    assert share.heartbeat("g3", "a", 0, ["one"], TOPICS, now_ms=0).error == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert share.heartbeat("g1", "b", 0, ["one"], TOPICS, now_ms=0).error == ErrorCode.NONE
    assert share.heartbeat("g1", "c", 0, ["one"], TOPICS, now_ms=0).error == ErrorCode.GROUP_MAX_SIZE_REACHED
    for member in "abcd":
        assert not isinstance(share.session("g", member, 0), int)
    assert share.session("g", "e", 0) == ErrorCode.SHARE_SESSION_LIMIT_REACHED
    assert not isinstance(share.session("g", "a", 0), int)  # a member opening its session again
