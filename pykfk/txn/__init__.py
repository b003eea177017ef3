"""The transaction coordinator: transactional ids, their producer ids and epochs, and
the transactions they run, kept in ``__transaction_state`` (see ``coordinator.py``)."""

from pykfk.txn.coordinator import TransactionCoordinator, TxnConfig, TxnMetadata
from pykfk.txn.records import TRANSACTION_STATE_TOPIC, TxnState

# The topic's configuration (Kafka's TransactionLog: compacted, 100 MiB segments,
# transaction.state.log.segment.bytes), so ids live until their tombstones.
TRANSACTION_STATE_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": 100 * 1024 * 1024,
    "compression.type": "uncompressed",
}

__all__ = ["TRANSACTION_STATE_TOPIC", "TRANSACTION_STATE_TOPIC_CONFIG", "TransactionCoordinator",
           "TxnConfig", "TxnMetadata", "TxnState"]
