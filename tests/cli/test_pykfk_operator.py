"""What an operator coming from kafka-*.sh, rpk and kcat reaches for, run as the shell
runs it against one broker process: consuming as a group member, read_committed,
starting at a time, kcat-style formats; lag totals over all groups and Kafka's reset
warnings; readable config synonyms; topic creation by replica assignment, deletion by
regex; --version, shell completion and progress bars on a terminal."""

from __future__ import annotations

import json
import re

from confluent_kafka import Producer

from pykfk.testing import BrokerProcess

from .conftest import Pykfk, on_terminal

TIMEOUT_S = 30


def _produce_json(pykfk: Pykfk, topic: str, records: list[dict[str, object]]) -> None:
    pykfk.ok("produce", topic, "--input-format", "json",
             input="".join(json.dumps(r) + "\n" for r in records))


def test_consume_as_group_member_commits_and_group_describe_totals_lag(
        pykfk: Pykfk, topic_name: str) -> None:
    pykfk.ok("topic", "create", topic_name, "-p", "2")
    pykfk.ok("produce", topic_name, "-p", "0", input="a\nb\nc\n")
    group = f"g-{topic_name}"

    first = pykfk.ok("consume", topic_name, "--group", group, "--from-beginning", "-e")
    assert first.out.split() == ["a", "b", "c"]
    assert f"group {group}: member" in first.err and "partitions 0,1" in first.err

    # The member committed what it read and left: nothing lags.
    table = pykfk.ok("group", "describe", group).out
    assert re.search(rf"{topic_name}\s+0\s+3\s+3\s+0", table), table
    assert "total lag 0 over 2 partitions" in table

    pykfk.ok("produce", topic_name, "-p", "1", input="d\ne\n")
    lagging = pykfk.ok("group", "describe", group, "-o", "json").json()
    assert lagging["total_lag"] == 2
    assert {(o["partition"], o["committed_offset"], o["lag"]) for o in lagging["offsets"]} == {
        (0, 3, 0), (1, 0, 2)}

    # A second run starts at the committed offsets (--from-beginning only applies to
    # partitions without one, as with kafka-console-consumer.sh).
    second = pykfk.ok("consume", topic_name, "-g", group, "--from-beginning", "-e")
    assert second.out.split() == ["d", "e"]

    # --all-groups: every group, each with its total.
    other = f"h-{topic_name}"
    pykfk.ok("consume", topic_name, "-g", other, "--offset", "earliest", "-n", "1")
    everything = pykfk.ok("group", "describe", "--all-groups", "-o", "json").json()
    totals = {g["group"]: g["total_lag"] for g in everything}
    assert totals[group] == 0 and totals[other] == 4
    text = pykfk.ok("group", "describe", "--all-groups").out
    assert f"group {group}:" in text and f"group {other}:" in text
    assert "total lag 4 over 2 partitions" in text
    both = pykfk("group", "describe", group, "--all-groups")
    assert both.code == 2 and "--all-groups" in both.err


def test_reset_offsets_past_the_end_warns_as_kafka_does(pykfk: Pykfk, topic_name: str) -> None:
    pykfk.ok("topic", "create", topic_name, "-p", "1")
    pykfk.ok("produce", topic_name, input="1\n2\n3\n4\n5\n")
    group = f"g-{topic_name}"
    pykfk.ok("consume", topic_name, "-g", group, "--from-beginning", "-n", "2")

    result = pykfk.ok("group", "reset-offsets", group, "--topic", topic_name, "--to-offset", "100",
                      "--execute", "-o", "json")
    warning = (f"New offset (100) is higher than latest offset for topic partition "
               f"{topic_name}-0. Value will be set to 5")
    assert f"Warning: {warning}" in result.err
    assert result.json()["warnings"] == [warning]
    assert result.json()["offsets"] == [{"topic": topic_name, "partition": 0,
                                         "current_offset": 2, "new_offset": 5}]
    described = pykfk.ok("group", "describe", group, "-o", "json").json()
    assert described["offsets"][0]["committed_offset"] == 5

    inside = pykfk.ok("group", "reset-offsets", group, "--topic", topic_name, "--to-offset", "1")
    assert "Warning" not in inside.err


def test_read_committed_skips_aborted_transactions(pykfk: Pykfk, broker: BrokerProcess,
                                                   topic_name: str) -> None:
    pykfk.ok("topic", "create", topic_name, "-p", "1")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic_name})
    producer.init_transactions(TIMEOUT_S)
    for values, commit in ((["c1", "c2"], True), (["a1", "a2"], False), (["c3"], True)):
        producer.begin_transaction()
        for value in values:
            producer.produce(topic_name, value.encode(), partition=0)
        producer.flush(TIMEOUT_S)
        (producer.commit_transaction if commit else producer.abort_transaction)(TIMEOUT_S)

    committed = pykfk.ok("consume", topic_name, "--from-beginning", "-e",
                         "--isolation-level", "read_committed")
    assert committed.out.split() == ["c1", "c2", "c3"]
    everything = pykfk.ok("consume", topic_name, "--from-beginning", "-e", "-o", "json")
    assert [r["value"] for r in everything.json_lines()] == ["c1", "c2", "a1", "a2", "c3"]


def test_start_at_a_time_and_kcat_format(pykfk: Pykfk, topic_name: str) -> None:
    pykfk.ok("topic", "create", topic_name, "-p", "2")
    _produce_json(pykfk, topic_name, [
        {"key": "k1", "value": "early", "timestamp": 1_000, "partition": 1},
        {"key": "k2", "value": "middle", "timestamp": 2_000, "partition": 1,
         "headers": {"trace": "t-2", "src": "import"}},
        {"key": None, "value": "late", "timestamp": 3_000, "partition": 1},
    ])
    shown = pykfk.ok("consume", topic_name, "-p", "1", "--offset", "@2000", "-e",
                     "-f", r"%t %p:%o %T %k=%s [%h] %K/%S\n")
    assert shown.out.splitlines() == [
        f"{topic_name} 1:1 2000 k2=middle [trace=t-2,src=import] 2/6",
        f"{topic_name} 1:2 3000 null=late [] -1/4",
    ]
    # The same start in ISO 8601, in JSON lines for scripts.
    later = pykfk.ok("consume", topic_name, "--offset", "@1970-01-01T00:00:02.500Z", "-e",
                     "-o", "json").json_lines()
    assert [(r["partition"], r["offset"], r["value"]) for r in later] == [(1, 2, "late")]
    bad = pykfk("consume", topic_name, "--offset", "@yesterday-ish", "-e")
    assert bad.code == 2 and "--offset" in bad.err


def test_config_get_shows_synonyms_kafka_style(pykfk: Pykfk, topic_name: str) -> None:
    table = pykfk.ok("cluster", "config", "get", "log.retention.ms", "--synonyms").out
    assert "DEFAULT_CONFIG:log.retention.hours=168" in table
    assert "None" not in table
    configs = pykfk.ok("cluster", "config", "get", "log.retention.ms", "-o", "json").json()["configs"]
    assert configs[0]["synonyms"] == [
        {"name": "log.retention.hours", "value": "168", "source": "DEFAULT_CONFIG"}]

    # Without -a: what differs from the defaults, else a sentence instead of an empty table.
    broker_table = pykfk.ok("cluster", "config", "get").out
    assert "log.dirs" in broker_table and "DEFAULT_CONFIG" not in broker_table
    pykfk.ok("topic", "create", topic_name, "-p", "1")
    plain = pykfk.ok("cluster", "config", "get", "--topic", topic_name)
    assert plain.out == "" and re.search(r"all \d+ configs are at their defaults", plain.err)
    pykfk.ok("topic", "alter-config", topic_name, "--set", "retention.ms=60000")
    changed = pykfk.ok("cluster", "config", "get", "--topic", topic_name, "--synonyms").out
    assert re.search(r"retention\.ms\s+60000\s+DYNAMIC_TOPIC_CONFIG", changed), changed
    assert "DYNAMIC_TOPIC_CONFIG:retention.ms=60000 DEFAULT_CONFIG:log.retention.hours=168" in changed


def test_topic_create_messages_assignment_and_delete_by_regex(pykfk: Pykfk,
                                                              topic_name: str) -> None:
    pykfk.ok("topic", "create", topic_name, "-p", "1")
    again = pykfk("topic", "create", topic_name)
    assert again.code == 1
    assert "already exists: TOPIC_ALREADY_EXISTS (36)" in again.err and ".:" not in again.err

    placed = f"{topic_name}-placed"
    pykfk.ok("topic", "create", placed, "--replica-assignment", "0,0,0")
    described = pykfk.ok("topic", "describe", placed, "-o", "json").json()
    assert [p["replicas"] for p in described["partitions"]] == [[0], [0], [0]]
    unknown = pykfk("topic", "create", f"{topic_name}-x", "--replica-assignment", "0:7")
    assert unknown.code == 1 and "INVALID_REPLICA_ASSIGNMENT" in unknown.err
    twice = pykfk("topic", "create", f"{topic_name}-x", "--replica-assignment", "0:0")
    assert twice.code == 2 and "names a broker twice" in twice.err
    mixed = pykfk("topic", "create", f"{topic_name}-x", "--replica-assignment", "0", "-p", "2")
    assert mixed.code == 2 and "--replica-assignment" in mixed.err

    deleted = pykfk.ok("topic", "delete", "-r", f"{re.escape(topic_name)}.*", "-o", "json").json()
    assert sorted(d["topic"] for d in deleted) == [topic_name, placed]
    assert all(d["deleted"] for d in deleted)
    names = [t["topic"] for t in pykfk.ok("topic", "list", "-o", "json").json()]
    assert topic_name not in names and placed not in names
    none = pykfk("topic", "delete", "-r", f"{re.escape(topic_name)}.*")
    assert none.code == 1 and "no topic matches" in none.err
    pykfk.ok("topic", "delete", "-r", f"{re.escape(topic_name)}.*", "--if-exists")


def test_version_and_shell_completion(pykfk: Pykfk, topic_name: str) -> None:
    version = pykfk.ok("--version").out
    assert version.startswith("pykfk ")
    assert "pykfk-broker and Apache Kafka brokers 0.11 and later" in version
    assert re.search(r"reassign, group delete-offsets\s+Kafka 2\.4\+", version)

    script = pykfk(env={"_PYKFK_COMPLETE": "bash_source"}, bootstrap=False)
    assert script.code == 0 and "complete -o nosort -F _pykfk_completion pykfk" in script.out
    words = pykfk(env={"_PYKFK_COMPLETE": "bash_complete", "COMP_WORDS": "pykfk group describe --al",
                       "COMP_CWORD": "3"}, bootstrap=False)
    assert words.out.split() == ["plain,--all-groups"]
    # Topic names come from the cluster.
    pykfk.ok("topic", "create", topic_name, "-p", "1")
    topics = pykfk(env={"_PYKFK_COMPLETE": "bash_complete", "COMP_CWORD": "3",
                        "COMP_WORDS": f"pykfk topic describe {topic_name[:6]}"})
    assert f"plain,{topic_name}" in topics.out.split()


def test_progress_bar_on_a_terminal_only(pykfk: Pykfk, topic_name: str) -> None:
    """A reset over many partitions shows a bar on stderr when it is a terminal; piped,
    stderr carries no bar."""
    topics = [f"{topic_name}-{i}" for i in range(2)]
    for t in topics:
        pykfk.ok("topic", "create", t, "-p", "4")
    args = ["group", "reset-offsets", f"g-{topic_name}", "--topic", topics[0], "--topic",
            topics[1], "--to-earliest"]
    shown = on_terminal(pykfk, *args)
    assert shown.code == 0, shown
    assert re.search(r"offsets\s+\[#+\]\s+100%", shown.err), shown.err
    assert len(shown.out.splitlines()) == 9  # the header and 8 partitions
    piped = pykfk.ok(*args)
    assert "%" not in piped.err and "offsets" not in piped.err
