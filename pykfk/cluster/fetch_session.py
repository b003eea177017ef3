"""A follower's side of an incremental fetch session (KIP-227) with one leader: the
first fetch names every partition and asks for a session; later ones name only the
partitions whose fetch position (or limits) changed and forget those no longer fetched.
A refused session (unknown id, epoch out of order) or a failed request starts over with
a full fetch, so a leader that lost the session (a restart, an eviction) costs one full
request and nothing else."""

from __future__ import annotations

from typing import Any

from pykfk.errors import ErrorCode

NO_SESSION = 0
INITIAL_EPOCH = 0
INT32_MAX = 2**31 - 1
_SESSION_ERRORS = (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH)

TopicPartition = tuple[str, int]
# A partition's fields of a Fetch request: fetch_offset, log_start_offset, ...
PartitionFields = dict[str, int]


class FollowerFetchSession:
    """What the leader's session holds, as far as this follower knows."""

    def __init__(self) -> None:
        self.session_id = NO_SESSION
        self.epoch = INITIAL_EPOCH
        self._sent: dict[TopicPartition, PartitionFields] = {}

    def reset(self) -> None:
        """Start over with a full fetch (after an error or a lost connection)."""
        self.session_id, self.epoch = NO_SESSION, INITIAL_EPOCH
        self._sent = {}

    def request_fields(self, wanted: dict[TopicPartition, PartitionFields]) -> dict[str, Any]:
        """The session fields, topics and forgotten topics of the next Fetch request for
        ``wanted`` (every partition to fetch now, with its fields)."""
        if self.session_id == NO_SESSION:
            send, forgotten = wanted, []
        else:
            send = {key: fields for key, fields in wanted.items() if self._sent.get(key) != fields}
            forgotten = [key for key in self._sent if key not in wanted]
        self._sent = {key: dict(fields) for key, fields in wanted.items()}
        return {
            "session_id": self.session_id,
            "session_epoch": self.epoch,
            "topics": _grouped(send),
            "forgotten_topics_data": [{"topic": topic, "partitions": parts}
                                      for topic, parts in _names_by_topic(forgotten).items()],
        }

    def answered(self, error_code: int, session_id: int) -> None:
        """Take the leader's answer: the session it opened or kept, or a refusal."""
        if error_code in _SESSION_ERRORS or (error_code != ErrorCode.NONE and self.session_id != NO_SESSION):
            self.reset()
            return
        if session_id == NO_SESSION:  # the leader keeps no session for us: full fetches
            self.reset()
            return
        self.session_id = session_id
        self.epoch = 1 if self.epoch >= INT32_MAX else self.epoch + 1


def _grouped(partitions: dict[TopicPartition, PartitionFields]) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, int]]] = {}
    for (topic, partition), fields in partitions.items():
        topics.setdefault(topic, []).append({"partition": partition, **fields})
    return [{"topic": topic, "partitions": parts} for topic, parts in topics.items()]


def _names_by_topic(keys: list[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic, partition in keys:
        out.setdefault(topic, []).append(partition)
    return out
