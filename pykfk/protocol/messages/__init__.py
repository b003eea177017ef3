"""Declarations of the Kafka APIs pykfk speaks, one module per API.

``API_SPECS`` maps api key -> ApiSpec. The versions declared here are what the codec
can encode and decode; which of them the broker advertises is decided by the server's
dispatch table.
"""

from __future__ import annotations

from ..schema import ApiSpec
from . import (
    alter_client_quotas,
    alter_configs,
    alter_partition_reassignments,
    alter_user_scram_credentials,
    api_versions,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_groups,
    delete_records,
    delete_topics,
    describe_acls,
    describe_client_quotas,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_log_dirs,
    describe_topic_partitions,
    describe_user_scram_credentials,
    elect_leaders,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    list_partition_reassignments,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    sasl_authenticate,
    sasl_handshake,
    sync_group,
)

# In api key order.
_MODULES = (
    produce,
    fetch,
    list_offsets,
    metadata,
    offset_commit,
    offset_fetch,
    find_coordinator,
    join_group,
    heartbeat,
    leave_group,
    sync_group,
    describe_groups,
    list_groups,
    sasl_handshake,
    api_versions,
    create_topics,
    delete_topics,
    delete_records,
    init_producer_id,
    offset_for_leader_epoch,
    describe_acls,
    create_acls,
    delete_acls,
    describe_configs,
    alter_configs,
    sasl_authenticate,
    describe_log_dirs,
    create_partitions,
    delete_groups,
    elect_leaders,
    incremental_alter_configs,
    alter_partition_reassignments,
    list_partition_reassignments,
    offset_delete,
    describe_client_quotas,
    alter_client_quotas,
    describe_user_scram_credentials,
    alter_user_scram_credentials,
    describe_cluster,
    describe_topic_partitions,
)

API_SPECS: dict[int, ApiSpec] = {m.SPEC.api_key: m.SPEC for m in _MODULES}

__all__ = ["API_SPECS", "ApiSpec"]
