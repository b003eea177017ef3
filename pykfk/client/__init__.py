"""The synchronous client core shared by ``pykfk.producer`` and ``pykfk.consumer``:
broker connections, cluster metadata (bootstrap list or ZooKeeper), partitioning,
serializers, and the ZooKeeper consumer-group mode."""

from pykfk.client.cluster_view import ClusterMetadata, TopicInfo
from pykfk.client.connection import BrokerConnection, ConnectionError_
from pykfk.client.partitioner import DefaultPartitioner, murmur2, partition_for_key

__all__ = [
    "BrokerConnection",
    "ClusterMetadata",
    "ConnectionError_",
    "DefaultPartitioner",
    "TopicInfo",
    "murmur2",
    "partition_for_key",
]
