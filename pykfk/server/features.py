"""Feature levels advertised in ApiVersions v3+ (KIP-584), named and numbered as Kafka 4.1
names them, limited to what this broker serves.

- ``metadata.version``: the level of Kafka 4.1 (4.1-IV1, 27); the lowest Kafka 4.1 supports
  is 3.3-IV3 (7).
- ``transaction.version`` 2: transactions v2 (KIP-890 part 2: EndTxn v5 bumps the epoch
  at the end of every transaction, Produce v12+ and TxnOffsetCommit v5 add their
  partitions to the transaction); level 1 is the server-side verification of part 1.
  Clients choose by the versions they send: older ones keep the flow before it. Level 2
  is offered only while Produce v12 is served: a client of level 2 sends no
  AddPartitionsToTxn, so a broker that cannot add partitions at a Produce offers 1.
- ``group.version`` 1: the consumer group protocol of KIP-848 is served.
- ``share.version`` 1: share groups (KIP-932), only while ``group.share.enable`` is on
  and the ShareGroupHeartbeat API is registered.

Features never change while a broker runs, so the finalized epoch is constant.
"""

from __future__ import annotations

from dataclasses import dataclass

from pykfk.protocol import typed

SHARE_GROUP_HEARTBEAT_KEY = 76
PRODUCE_KEY = 0
# The Produce version from which a transactional produce adds its partition (KIP-890 part 2).
PRODUCE_ADDS_PARTITIONS = 12
FINALIZED_FEATURES_EPOCH = 1


@dataclass(frozen=True)
class Feature:
    name: str
    min_version: int  # lowest level the broker supports
    max_version: int  # highest level the broker supports
    finalized: int  # the cluster's level (0: finalized features omit it)


METADATA_VERSION = Feature("metadata.version", 7, 27, 27)
TRANSACTION_VERSION = Feature("transaction.version", 0, 2, 2)
TRANSACTION_VERSION_1 = Feature("transaction.version", 0, 1, 1)
GROUP_VERSION = Feature("group.version", 0, 1, 1)
SHARE_VERSION = Feature("share.version", 0, 1, 1)


def served_features(share_groups: bool, produce_max_version: int = PRODUCE_ADDS_PARTITIONS
                    ) -> tuple[Feature, ...]:
    """The features of this broker, ``share.version`` only when share groups are served,
    ``transaction.version`` 2 only when Produce serves ``PRODUCE_ADDS_PARTITIONS``."""
    transactions = TRANSACTION_VERSION if produce_max_version >= PRODUCE_ADDS_PARTITIONS else TRANSACTION_VERSION_1
    base = (METADATA_VERSION, transactions, GROUP_VERSION)
    return base + (SHARE_VERSION,) if share_groups else base


def supported_keys(features: tuple[Feature, ...], api_version: int
                   ) -> list[typed.ApiVersionsResponseSupportedFeatureKey]:
    """Supported ranges; v3 clients cannot read a minimum of 0, so Kafka sends them 1."""
    keys: list[typed.ApiVersionsResponseSupportedFeatureKey] = []
    for feature in features:
        low = 1 if api_version < 4 and feature.min_version == 0 else feature.min_version
        keys.append({"name": feature.name, "min_version": low, "max_version": feature.max_version})
    return keys


def finalized_keys(features: tuple[Feature, ...]) -> list[typed.ApiVersionsResponseFinalizedFeatureKey]:
    """Finalized levels (min = max = the level, as Kafka sends them), level 0 left out."""
    return [{"name": f.name, "max_version_level": f.finalized, "min_version_level": f.finalized}
            for f in features if f.finalized > 0]
