"""An OffsetCommit of a whole large topic: whether its partitions exist is asked with a
fixed number of look-ups per topic, not one per partition (a consumer of 10,000
partitions commits them all each time), and the answers stay those of one look-up per
partition: a partition past the topic's end or below 0 is UNKNOWN_TOPIC_OR_PARTITION, the
others are stored; metadata over offset.metadata.max.bytes in UTF-8 is refused."""

from __future__ import annotations

from pykfk.errors import ErrorCode as E
from pykfk.group.coordinator import GroupConfig, GroupCoordinator
from pykfk.group.storage import MemoryOffsetsLog

PARTITIONS = 10_000
OFFSETS_PARTITIONS = 2


class Topics:
    """The broker's answer (a topic's partitions are 0 to n-1), counting the questions."""

    def __init__(self, sizes: dict[str, int]):
        self.sizes = sizes
        self.lookups = 0

    def __call__(self, topic: str, partition: int) -> bool:
        self.lookups += 1
        return 0 <= partition < self.sizes.get(topic, 0)


async def coordinator(topics: Topics) -> GroupCoordinator:
    coord = GroupCoordinator(GroupConfig(group_initial_rebalance_delay_ms=0,
                                         offsets_topic_num_partitions=OFFSETS_PARTITIONS),
                             partition_exists=topics)
    await coord.start(run_retention=False)
    for p in range(OFFSETS_PARTITIONS):
        await coord.load_partition(p, MemoryOffsetsLog())
    return coord


def codes(result: dict) -> dict[tuple[str, int], E]:
    return {(t["name"], p["partition_index"]): p["error_code"]
            for t in result["topics"] for p in t["partitions"]}


async def test_a_commit_of_every_partition_asks_a_few_times_per_topic() -> None:
    topics = Topics({"big": PARTITIONS, "small": 3})
    coord = await coordinator(topics)
    try:
        commit = [("big", [(p, 100 + p, 0, "") for p in range(PARTITIONS)]),
                  ("small", [(2, 7, -1, None), (0, 5, -1, "m")])]
        result = await coord.offset_commit("g", -1, "", commit)
        assert topics.lookups <= 2 * len(commit)
        assert set(codes(result).values()) == {E.NONE} and len(codes(result)) == PARTITIONS + 2
        fetched = await coord.offset_fetch("g", [("big", [0, PARTITIONS - 1]), ("small", [0, 2])])
        offsets = {(t["name"], p["partition_index"]): p["committed_offset"]
                   for t in fetched["topics"] for p in t["partitions"]}
        assert offsets == {("big", 0): 100, ("big", PARTITIONS - 1): 100 + PARTITIONS - 1,
                           ("small", 0): 5, ("small", 2): 7}
    finally:
        await coord.shutdown()


async def test_partitions_outside_the_topic_are_refused_one_by_one() -> None:
    topics = Topics({"big": PARTITIONS})
    coord = await coordinator(topics)
    try:
        commit = [("big", [(5, 1, -1, ""), (PARTITIONS, 1, -1, ""), (-1, 1, -1, ""), (6, 2, -1, "")]),
                  ("missing", [(0, 1, -1, "")])]
        result = codes(await coord.offset_commit("g", -1, "", commit))
        assert result == {("big", 5): E.NONE, ("big", PARTITIONS): E.UNKNOWN_TOPIC_OR_PARTITION,
                          ("big", -1): E.UNKNOWN_TOPIC_OR_PARTITION, ("big", 6): E.NONE,
                          ("missing", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
        fetched = await coord.offset_fetch("g", [("big", [5, 6, PARTITIONS])])
        assert [p["committed_offset"] for p in fetched["topics"][0]["partitions"]] == [1, 2, -1]
    finally:
        await coord.shutdown()


async def test_metadata_is_measured_in_utf8_bytes() -> None:
    coord = await coordinator(Topics({"t": 4}))
    limit = coord.config.offset_metadata_max_bytes
    try:
        commit = [("t", [(0, 1, -1, "\N{EURO SIGN}" * (limit // 3)),       # 3 bytes each: fits
                         (1, 1, -1, "\N{EURO SIGN}" * (limit // 3 + 1)),   # one over
                         (2, 1, -1, "\N{GRINNING FACE}" * (limit // 4)),   # 4 bytes each: exactly
                         (3, 1, -1, "x" * (limit + 1))])]
        assert codes(await coord.offset_commit("g", -1, "", commit)) == {
            ("t", 0): E.NONE, ("t", 1): E.OFFSET_METADATA_TOO_LARGE,
            ("t", 2): E.NONE, ("t", 3): E.OFFSET_METADATA_TOO_LARGE}
    finally:
        await coord.shutdown()
