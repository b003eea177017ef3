"""BrokerConfig: Kafka names, precedence rules, validation and the command line."""

import dataclasses
import subprocess
import sys

import pytest

from pykfk.config import (
    BrokerConfig,
    ConfigError,
    format_config_value,
    parse_properties,
    validate_topic_configs,
)


def test_defaults_are_a_loopback_developer_broker():
    config = BrokerConfig()
    assert [str(listener) for listener in config.listeners] == ["PLAINTEXT://127.0.0.1:9092"]
    assert config.log_dirs == ["./data"]
    assert config.num_partitions == 1
    assert config.auto_create_topics_enable is True
    assert config.message_max_bytes == 1048588
    assert config.socket_request_max_bytes == 104857600
    assert config.log_retention_ms == 168 * 3_600_000
    assert config.log_roll_ms == 168 * 3_600_000
    assert config.connections_max_idle_ms == 600000


def test_precedence_of_time_and_dir_settings():
    config = BrokerConfig(
        {
            "log.dir": "/a",
            "log.dirs": "/b,/c",
            "log.retention.hours": "1",
            "log.retention.minutes": "5",
            "log.roll.hours": "2",
        }
    )
    assert config.log_dirs == ["/b", "/c"]
    assert config.log_retention_ms == 5 * 60_000  # minutes beat hours
    assert config.log_roll_ms == 2 * 3_600_000
    config = BrokerConfig({"log.retention.ms": "1234", "log.retention.minutes": "5", "log.roll.ms": "99"})
    assert config.log_retention_ms == 1234
    assert config.log_roll_ms == 99
    assert BrokerConfig({"log.retention.ms": "-1"}).log_retention_ms == -1


def test_properties_file_syntax():
    text = (
        "# comment\n! also a comment\n"
        "broker.id=3\n"
        "log.dirs = /x, /y\n"
        "num.partitions: 8\n"
        "listeners PLAINTEXT://127.0.0.1:19092\n"
        "log.retention.hours=\\\n   24\n"
    )
    props = parse_properties(text)
    assert props == {
        "broker.id": "3",
        "log.dirs": "/x, /y",
        "num.partitions": "8",
        "listeners": "PLAINTEXT://127.0.0.1:19092",
        "log.retention.hours": "24",
    }


def test_overrides_beat_the_file(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("num.partitions=4\nlog.segment.bytes=2048\n")
    config = BrokerConfig.load(str(path), ["num.partitions=8"])
    assert config.num_partitions == 8
    assert config.log_segment_bytes == 2048
    assert config.is_explicit("log.segment.bytes")
    assert not config.is_explicit("message.max.bytes")


@pytest.mark.parametrize(
    "props, key",
    [
        ({"no.such.key": "1"}, "no.such.key"),
        ({"num.partitions": "zero"}, "num.partitions"),
        ({"num.partitions": "0"}, "num.partitions"),
        ({"auto.create.topics.enable": "yes"}, "auto.create.topics.enable"),
        ({"log.message.timestamp.type": "Now"}, "log.message.timestamp.type"),
        ({"listeners": "PLAINTEXT:/127.0.0.1"}, "listeners"),
        ({"listeners": "FOO://127.0.0.1:9093"}, "listeners"),
        ({"listeners": "SSL://127.0.0.1:9093"}, "ssl.keystore.location"),
        ({"listeners": "PLAINTEXT://:9092,PLAINTEXT://:9093"}, "listeners"),
        ({"listeners": "PLAINTEXT://:9092,SSL://:9092", "ssl.keystore.location": "k.pem"}, "listeners"),
        ({"listener.security.protocol.map": "PLAINTEXT:TLS"}, "listener.security.protocol.map"),
        ({"inter.broker.listener.name": "INTERNAL"}, "inter.broker.listener.name"),
        ({"advertised.listeners": "SSL://h:1"}, "advertised.listeners"),
        ({"listener.name.plaintext.ssl.client.auth": "maybe"}, "listener.name.plaintext.ssl.client.auth"),
        ({"listener.name.plaintext.ssl.bogus": "x"}, "listener.name.plaintext.ssl.bogus"),
        ({"listener.name.other.ssl.client.auth": "none"}, "listener.name.other.ssl.client.auth"),
        ({"ssl.client.auth": "always"}, "ssl.client.auth"),
        ({"listeners": "PLAINTEXT://127.0.0.1:70000"}, "listeners"),
        ({"socket.request.max.bytes": "99999999999"}, "socket.request.max.bytes"),
    ],
)
def test_invalid_settings_name_their_key(props, key):
    with pytest.raises(ConfigError) as info:
        BrokerConfig(props)
    assert info.value.key == key
    assert key in str(info.value)


def test_topic_configs_are_validated():
    assert validate_topic_configs({"retention.ms": "1000", "cleanup.policy": "compact,delete"}) == {
        "retention.ms": 1000,
        "cleanup.policy": ["compact", "delete"],
    }
    with pytest.raises(ConfigError, match="segment.bytes"):
        validate_topic_configs({"segment.bytes": "small"})
    with pytest.raises(ConfigError, match="retention.hours"):
        validate_topic_configs({"retention.hours": "1"})
    with pytest.raises(ConfigError, match="cleanup.policy"):
        validate_topic_configs({"cleanup.policy": "shred"})


def test_topic_defaults_follow_the_broker():
    config = BrokerConfig({"log.segment.bytes": "4096", "message.max.bytes": "5000"})
    merged = config.topic_config({"segment.bytes": "8192"})
    assert merged["segment.bytes"] == 8192
    assert merged["max.message.bytes"] == 5000


def _run_broker(*args, timeout=30):
    return subprocess.run(
        [sys.executable, "-m", "pykfk.broker", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def test_command_line_rejects_unknown_key():
    result = _run_broker("--override", "log.segmnet.bytes=1024")
    assert result.returncode != 0
    assert "log.segmnet.bytes" in result.stderr


def test_command_line_rejects_bad_value_from_file(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("log.retention.hours=forever\n")
    result = _run_broker(str(path))
    assert result.returncode != 0
    assert "log.retention.hours" in result.stderr


def test_command_line_cluster_mode_without_zookeeper_fails_clearly(tmp_path):
    from pykfk.testing import free_port

    unreachable = f"127.0.0.1:{free_port()}"
    result = _run_broker(
        "--override", f"zookeeper.connect={unreachable}",
        "--override", "zookeeper.connection.timeout.ms=1000",
        "--override", f"log.dirs={tmp_path}",
        "--override", "listeners=PLAINTEXT://127.0.0.1:0",
    )
    assert result.returncode != 0
    assert f"cannot use ZooKeeper at {unreachable}" in result.stderr


def test_the_committed_configuration_reference_is_up_to_date():
    from pathlib import Path

    from pykfk.config import config_reference_markdown

    page = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
    assert page.read_text(encoding="utf-8") == config_reference_markdown(), (
        "docs/configuration.md is stale: python -m pykfk.config --markdown > docs/configuration.md")


def test_every_topic_setting_is_declared_once_and_defaults_from_its_broker_synonyms():
    from pykfk.config import BROKER_KEYS, TOPIC_KEYS
    from pykfk.log import LogConfig

    for name, key in TOPIC_KEYS.items():
        assert all(s in BROKER_KEYS for s, _factor in key.synonyms), name
        assert key.parse(format_config_value(key.default)) == key.default, name  # defaults parse
    # LogConfig's fields are exactly the log settings of the declaration, with its defaults.
    log_attrs = {key.attr for key in TOPIC_KEYS.values() if key.attr}
    assert log_attrs == {f.name for f in dataclasses.fields(LogConfig)}
    assert LogConfig().to_properties()["retention.ms"] == str(TOPIC_KEYS["retention.ms"].default)
    broker = BrokerConfig({"log.retention.minutes": "5", "log.roll.hours": "2", "log.retention.bytes": "-7"})
    defaults = broker.topic_defaults()
    assert (defaults["retention.ms"], defaults["segment.ms"], defaults["retention.bytes"]) == (300_000, 7_200_000, -1)
    with pytest.raises(ConfigError) as bad:
        LogConfig().with_overrides({"segment.bytes": "ten"})
    assert bad.value.key == "segment.bytes"
