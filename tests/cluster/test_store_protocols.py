"""The metadata store's interface split by concern, and the controller role: every member
of the whole store belongs to exactly one concern; both stores implement each concern
with its parameters; a cluster of one runs the same broker code with a LocalController
(no store-kind branches), which answers the admin requests as Kafka would."""

from __future__ import annotations

import asyncio
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

from pykfk.cluster import controller as controller_module
from pykfk.cluster.controller import (
    PREFERRED,
    UNCLEAN,
    ClusterController,
    Controller,
    ControllerSettings,
    ControllerStore,
)
from pykfk.cluster.embedded import EmbeddedMetadataStore
from pykfk.cluster.local_controller import LocalController
from pykfk.cluster.metadata import (
    BrokerInfo,
    ConfigStore,
    MembershipStore,
    MetadataStore,
    ProducerIdStore,
    SecurityStore,
    StoreEvents,
    TopicStore,
)
from pykfk.cluster.zookeeper import ZooKeeperMetadataStore
from pykfk.errors import ErrorCode

CONCERNS = (TopicStore, MembershipStore, ConfigStore, SecurityStore, ProducerIdStore, StoreEvents)
PYKFK = Path(__file__).resolve().parents[2] / "pykfk"


def members(protocol: type) -> set[str]:
    """The names a Protocol declares itself or through the Protocols it extends."""
    names: set[str] = set()
    for cls in protocol.__mro__:
        if cls in (object,) or not getattr(cls, "_is_protocol", False) or cls.__module__ == "typing":
            continue
        names |= set(inspect.get_annotations(cls))
        names |= {n for n, v in cls.__dict__.items() if not n.startswith("_") and (callable(v) or isinstance(v, property))}
    return names


def test_every_member_of_the_store_belongs_to_exactly_one_concern() -> None:
    whole = members(MetadataStore)
    owners = {name: [c.__name__ for c in CONCERNS if name in members(c)] for name in whole}
    assert {name: found for name, found in owners.items() if len(found) != 1} == {"close": []}
    assert len(whole) > 30


@pytest.fixture
def stores(tmp_path: Path) -> list[Any]:
    me = BrokerInfo(0, "127.0.0.1", 9092)
    return [EmbeddedMetadataStore(str(tmp_path), me), ZooKeeperMetadataStore("127.0.0.1:1", me)]


@pytest.mark.parametrize("concern", CONCERNS, ids=lambda c: c.__name__)
def test_both_stores_implement_each_concern_with_its_parameters(stores: list[Any], concern: type) -> None:
    for store in stores:
        for name in sorted(members(concern)):
            assert hasattr(store, name), f"{type(store).__name__} lacks {concern.__name__}.{name}"
            declared = getattr(concern, name, None)
            if not callable(declared):
                continue
            implemented = getattr(store, name)
            assert inspect.iscoroutinefunction(implemented) == inspect.iscoroutinefunction(declared), name
            wanted = [p for p in inspect.signature(declared).parameters if p != "self"]
            got = list(inspect.signature(implemented).parameters)
            assert got[:len(wanted)] == wanted, f"{type(store).__name__}.{name}{got} != {wanted}"


def test_the_zookeeper_store_is_what_its_controller_needs(stores: list[Any]) -> None:
    zookeeper = stores[1]
    assert [name for name in sorted(members(ControllerStore)) if not hasattr(zookeeper, name)] == []


def test_both_controllers_fill_the_controller_role(stores: list[Any]) -> None:
    for role in (Controller(0, stores[1], ControllerSettings()), LocalController(0, stores[0])):
        assert [name for name in sorted(members(ClusterController)) if not hasattr(role, name)] == []
        wanted = {n: [p for p in inspect.signature(getattr(ClusterController, n)).parameters if p != "self"]
                  for n in members(ClusterController) if callable(getattr(ClusterController, n, None))}
        assert {n: list(inspect.signature(getattr(role, n)).parameters) for n in wanted} == wanted
    assert Controller.deletes_stray_logs and not LocalController.deletes_stray_logs


def test_no_code_asks_which_kind_of_store_runs() -> None:
    """A cluster of one differs by its controller object, not by branches."""
    asking = re.compile(r"single_broker|isinstance\([^)]*(Embedded|ZooKeeper)MetadataStore")
    found = [f"{path.relative_to(PYKFK)}:{n}" for path in PYKFK.rglob("*.py")
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if asking.search(line)]
    assert found == []
    assert "EmbeddedMetadataStore" not in inspect.getsource(controller_module)


def test_a_local_controller_answers_as_a_cluster_of_one(tmp_path: Path) -> None:
    async def run() -> None:
        store = EmbeddedMetadataStore(str(tmp_path), BrokerInfo(7, "127.0.0.1", 9092))
        await store.create_topic("t", 2, 1, {})
        local = LocalController(7, store)
        local.start()
        assert local.active and local.internal_topic_replication_factor("__consumer_offsets", 3) == 1
        for kind in (PREFERRED, UNCLEAN):
            outcome = await local.elect_leaders(kind, None, 1.0)
            assert {k: v[0] for k, v in outcome.items()} == {("t", 0): ErrorCode.ELECTION_NOT_NEEDED,
                                                               ("t", 1): ErrorCode.ELECTION_NOT_NEEDED}
        missing = await local.elect_leaders(PREFERRED, [("t", 5), ("nope", 0)], 1.0)
        assert {v[0] for v in missing.values()} == {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        moves = await local.alter_reassignments({("t", 0): [7], ("t", 1): [7, 8], ("nope", 0): [7]}, True, 1.0)
        assert moves[("t", 0)] is None
        assert moves[("t", 1)] is not None and moves[("t", 1)].code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
        assert moves[("nope", 0)] is not None and moves[("nope", 0)].code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert await local.list_reassignments(None, 1.0) == {}
        await local.stop()

    asyncio.run(run())
