"""pykfk: a Kafka-protocol commit-log broker with a compiled hot path."""

__version__ = "0.1.0"
