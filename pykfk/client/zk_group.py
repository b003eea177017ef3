"""The seeds' ZooKeeper consumer-group mode (Kafka 0.8's ZookeeperConsumerConnector).

    /consumers/<group>/ids/<consumer_id>          ephemeral  {"version":1,"subscription":{topic|regex: streams},
                                                              "pattern":"static"|"white_list"|"black_list",
                                                              "timestamp":"<ms>"}
    /consumers/<group>/owners/<topic>/<partition> ephemeral  "<consumer_id>-<stream index>" (the owning thread)
    /consumers/<group>/offsets/<topic>/<partition> persistent "<offset>" (the next offset to consume)

Rebalance (the seeds' range algorithm): every consumer lists the group's consumer thread
ids (``<consumer_id>-<i>`` for each of its streams per topic) and the topic's partitions,
both sorted; thread ``k`` of ``C`` takes ``P // C`` partitions starting at
``k * (P // C) + min(k, P % C)``, one more when ``k < P % C``. Ownership is claimed by
creating the owner znodes; when one still exists (its old owner has not released it yet)
everything claimed is released and the rebalance is retried after a backoff.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
from collections.abc import Callable
from typing import Any

from pykfk.client.cluster_view import ClusterMetadata

log = logging.getLogger("pykfk.consumer")


class RebalanceFailed(Exception):
    """Could not claim every assigned partition within ``rebalance_max_retries``."""


class ZkGroupMembership:
    def __init__(
        self,
        cluster: ClusterMetadata,
        group_id: str,
        consumer_id: str,
        *,
        on_change: Callable[[], None],
        rebalance_max_retries: int = 4,
        rebalance_backoff_ms: int = 2000,
        exclude_internal_topics: bool = True,
    ):
        if cluster.zk is None:
            raise ValueError("ZooKeeper group mode needs zk_connect")
        self.cluster = cluster
        self.zk = cluster.zk
        self.group_id = group_id
        self.consumer_id = consumer_id
        self.on_change = on_change
        self.rebalance_max_retries = rebalance_max_retries
        self.rebalance_backoff = rebalance_backoff_ms / 1000
        self.exclude_internal_topics = exclude_internal_topics
        self.ids_path = f"/consumers/{group_id}/ids"
        self.owners_path = f"/consumers/{group_id}/owners"
        self.offsets_path = f"/consumers/{group_id}/offsets"
        self.owned: dict[tuple[str, int], str] = {}
        self._registration: bytes | None = None
        self._watching = False
        self._session_lost = False
        self.zk.add_listener(self._on_state)

    # -- registration and watches

    def register(self, subscription: dict[str, int], pattern: str = "static") -> None:
        """Publish this consumer's subscription under ids/ and watch the group."""
        data = {
            "version": 1,
            "subscription": subscription,
            "pattern": pattern,
            "timestamp": str(int(time.time() * 1000)),
        }
        self._registration = json.dumps(data).encode()
        self._create_registration()
        if not self._watching:
            self._watching = True
            self.zk.ChildrenWatch(self.ids_path, lambda _children: self.on_change())

    def _create_registration(self) -> None:
        from kazoo.exceptions import NodeExistsError

        path = f"{self.ids_path}/{self.consumer_id}"
        self.zk.ensure_path(self.ids_path)
        try:
            self.zk.create(path, self._registration, ephemeral=True)
        except NodeExistsError:
            # Left from an expired session of ours: replace it.
            self.zk.delete(path)
            self.zk.create(path, self._registration, ephemeral=True)

    def _on_state(self, state: str) -> None:
        from kazoo.protocol.states import KazooState

        if state == KazooState.LOST:
            self._session_lost = True  # ephemerals are gone: re-register on reconnect
        elif state == KazooState.CONNECTED and self._session_lost:
            self.on_change()

    def restore_session(self) -> None:
        """After a lost session: register again (ownership is claimed by the rebalance)."""
        if self._session_lost and self._registration is not None:
            self._session_lost = False
            self.owned.clear()
            self._create_registration()

    # -- group view

    def _consumer_topics(self, consumer_id: str, all_topics: list[str]) -> dict[str, int]:
        """topic -> stream count of one registered consumer."""
        from kazoo.exceptions import NoNodeError

        try:
            raw, _ = self.zk.get(f"{self.ids_path}/{consumer_id}")
            data = json.loads(raw)
        except (NoNodeError, ValueError):
            return {}
        subscription = data.get("subscription", {})
        pattern = data.get("pattern", "static")
        if pattern == "static":
            return {t: int(n) for t, n in subscription.items()}
        out = {}
        for regex, n in subscription.items():
            compiled = re.compile(regex)
            for topic in all_topics:
                if self.exclude_internal_topics and topic.startswith("__"):
                    continue
                matched = compiled.fullmatch(topic) is not None
                if matched == (pattern == "white_list"):
                    out[topic] = int(n)
        return out

    def assignment(self, all_topics: list[str]) -> dict[tuple[str, int], str]:
        """This consumer's share: (topic, partition) -> owning thread id."""
        consumers = sorted(self.zk.get_children(self.ids_path))
        threads_per_topic: dict[str, list[str]] = {}
        for consumer in consumers:
            for topic, n in self._consumer_topics(consumer, all_topics).items():
                threads_per_topic.setdefault(topic, []).extend(f"{consumer}-{i}" for i in range(n))
        mine_topics = [
            t
            for t, threads in threads_per_topic.items()
            if any(x.startswith(self.consumer_id + "-") for x in threads)
        ]
        if mine_topics:
            self.cluster.refresh(mine_topics)
        result: dict[tuple[str, int], str] = {}
        for topic in mine_topics:
            threads = sorted(threads_per_topic[topic])
            info = self.cluster.topics.get(topic)
            partitions = info.partitions if info else []
            if not partitions:
                continue
            per, extra = divmod(len(partitions), len(threads))
            for k, thread in enumerate(threads):
                if (
                    not thread.startswith(self.consumer_id + "-")
                    or thread[len(self.consumer_id) + 1 :].isdigit() is False
                ):
                    continue
                start = k * per + min(k, extra)
                count = per + (1 if k < extra else 0)
                for p in partitions[start : start + count]:
                    result[(topic, p)] = thread
        return result

    def rebalance(self, all_topics: Callable[[], list[str]]) -> dict[tuple[str, int], str]:
        """Compute this consumer's share and claim it; retries while old owners hold on."""
        self.restore_session()
        for attempt in range(self.rebalance_max_retries + 1):
            self.release()
            wanted = self.assignment(all_topics())
            if self._claim(wanted):
                return wanted
            log.info(
                "consumer %s: partitions still owned by others, rebalance attempt %d/%d",
                self.consumer_id,
                attempt + 1,
                self.rebalance_max_retries + 1,
            )
            time.sleep(self.rebalance_backoff)
        raise RebalanceFailed(f"{self.consumer_id} could not claim its partitions")

    def _claim(self, wanted: dict[tuple[str, int], str]) -> bool:
        from kazoo.exceptions import NodeExistsError

        for (topic, partition), thread in sorted(wanted.items()):
            path = f"{self.owners_path}/{topic}/{partition}"
            self.zk.ensure_path(f"{self.owners_path}/{topic}")
            try:
                self.zk.create(path, thread.encode(), ephemeral=True)
            except NodeExistsError:
                try:
                    current, _ = self.zk.get(path)
                except Exception:  # noqa: BLE001 - owner vanished meanwhile: treat as not ours
                    current = b""
                if current.decode(errors="replace") != thread:
                    self.release()
                    return False
            self.owned[(topic, partition)] = thread
        return True

    def release(self) -> None:
        """Delete the owner znodes this consumer holds."""
        from kazoo.exceptions import NoNodeError

        for (topic, partition), thread in list(self.owned.items()):
            path = f"{self.owners_path}/{topic}/{partition}"
            try:
                current, _ = self.zk.get(path)
                if current.decode(errors="replace") == thread:
                    self.zk.delete(path)
            except NoNodeError:
                pass
            del self.owned[(topic, partition)]

    # -- offsets

    def fetch_offsets(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        from kazoo.exceptions import NoNodeError

        out = {}
        for topic, partition in partitions:
            try:
                raw, _ = self.zk.get(f"{self.offsets_path}/{topic}/{partition}")
                out[(topic, partition)] = int(raw.decode().strip())
            except (NoNodeError, ValueError):
                out[(topic, partition)] = -1
        return out

    def commit(self, offsets: dict[tuple[str, int], int]) -> None:
        from kazoo.exceptions import NoNodeError

        for (topic, partition), offset in offsets.items():
            path = f"{self.offsets_path}/{topic}/{partition}"
            data = str(offset).encode()
            try:
                self.zk.set(path, data)
            except NoNodeError:
                self.zk.ensure_path(f"{self.offsets_path}/{topic}")
                try:
                    self.zk.create(path, data)
                except Exception:  # noqa: BLE001 - created concurrently: overwrite
                    self.zk.set(path, data)

    def leave(self) -> None:
        from kazoo.exceptions import NoNodeError

        self.release()
        try:
            self.zk.delete(f"{self.ids_path}/{self.consumer_id}")
        except NoNodeError:
            pass
        except Exception as exc:  # noqa: BLE001 - ZooKeeper gone: the ephemeral expires with the session
            log.debug("could not deregister %s: %s", self.consumer_id, exc)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # the client may already be closed
            self.zk.remove_listener(self._on_state)


def describe(zk: Any, group_id: str) -> dict[str, Any]:
    """A snapshot of a group's znodes (for tools and tests)."""
    out: dict[str, Any] = {"ids": [], "owners": {}, "offsets": {}}
    base = f"/consumers/{group_id}"
    if zk.exists(f"{base}/ids"):
        out["ids"] = sorted(zk.get_children(f"{base}/ids"))
    for kind in ("owners", "offsets"):
        if not zk.exists(f"{base}/{kind}"):
            continue
        for topic in zk.get_children(f"{base}/{kind}"):
            for partition in zk.get_children(f"{base}/{kind}/{topic}"):
                data, _ = zk.get(f"{base}/{kind}/{topic}/{partition}")
                out[kind][(topic, int(partition))] = data.decode()
    return out
