"""Rooms on a real three-node Redis Cluster: every room's scripts and pipelines run in its
own slot, the coordinators' and workers' clients are cluster clients, and the Celery broker
is the plain Redis (its Redis transport does not speak Cluster)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
import redis

from parley.client import Client
from parley.coordinator.connections import connect
from parley.coordinator.lease import Leases
from parley.processes import ProcessGroup
from parley.shared.keys import Keys
from parley.shared.models import StopReason
from parley.shared.scripts import Scripts
from parley.shared.settings import Settings
from tests.chaos.harness import logs_on_failure, parley_env
from tests.conftest import REDIS_URL
from tests.support.cluster import LocalCluster
from tests.support.rooms import scripted_spec

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

SCRIPTS = {"Optimist": [{"score": 0.9, "message": "On a cluster."},
                        {"score": 0.1, "message": ""}],
           "Skeptic": [{"score": 0.2, "message": "Which node?"},
                       {"score": 0.8, "message": "Every slot answered."}]}
ROOMS = 6


def test_rooms_run_on_a_three_node_cluster_with_the_broker_on_plain_redis(
        tmp_path: Path, queue: str):
    prefix = f"parley-cluster-{uuid.uuid4().hex[:8]}"
    with LocalCluster(tmp_path) as cluster, ProcessGroup(tmp_path, parley_env(
            cluster.url(), prefix, redis_cluster="true", broker_url=REDIS_URL,
            scan_interval_s=0.1)) as group, logs_on_failure(group):
        group.worker("-Q", queue, "-c", "8")
        group.coordinator()
        client = Client(Settings(redis_url=cluster.url(), broker_url=REDIS_URL,
                                 redis_cluster=True, key_prefix=prefix))
        spec = scripted_spec(SCRIPTS, queue=queue)
        rooms = [client.create_room(spec) for _ in range(ROOMS)]
        posts = [client.post(room, "Does it run on a cluster?") for room in rooms]
        results = [client.wait(room, post, timeout_s=60) for room, post in zip(rooms, posts, strict=True)]
        # The rooms' logs are spread over the nodes (a node lists only the keys it holds).
        logs = {Keys(prefix).log(room).encode() for room in rooms}
        holders = {port for port in cluster.ports
                   if logs & set(redis.Redis(port=port).scan_iter(match=f"{prefix}:*"))}

    for result in results:
        assert [(m.sender, m.content) for m in result.messages] == [
            ("User", "Does it run on a cluster?"), ("Optimist", "On a cluster."),
            ("Skeptic", "Every slot answered.")]
        assert result.stop_reason == StopReason.LULL
    assert len(holders) > 1


def test_a_cluster_needs_a_broker_of_its_own():
    with pytest.raises(ValueError, match="PARLEY_BROKER_URL to a plain Redis or RabbitMQ"):
        Settings(redis_url="redis://127.0.0.1:7000/0", redis_cluster=True, broker_url="")


def test_leases_on_a_cluster_are_renewed_across_slots_and_a_lost_one_is_told(tmp_path: Path):
    # The renewal batches go out per slot (a cluster pipeline takes no scripts): every
    # held lease renews, and one taken away reads as lost, not as an error for all.
    prefix = f"parley-cluster-{uuid.uuid4().hex[:8]}"
    with LocalCluster(tmp_path) as cluster:
        settings = Settings(redis_url=cluster.url(), broker_url=REDIS_URL,
                            redis_cluster=True, key_prefix=prefix)
        store = Client(settings).store
        rooms = [f"room-{n}" for n in range(12)]
        for room in rooms:
            store.create_room(room, scripted_spec(SCRIPTS))
        renewed, after_loss = asyncio.run(renew_on(settings, rooms))
        slots = {store.redis.keyslot(Keys(prefix).lease(room)) for room in rooms}

    assert len(slots) > 1
    assert renewed == [True] * len(rooms)
    assert after_loss == [False] + [True] * (len(rooms) - 1)


async def renew_on(settings: Settings, rooms: list[str]) -> tuple[list[bool], list[bool]]:
    """Take every room's lease on the cluster, renew them all, then again after the
    first one's lease key was deleted."""
    client = connect(settings, max_connections=16)
    try:
        leases = Leases(client, Keys(settings.key_prefix), Scripts(client), "c1", 5.0)
        held = [await leases.acquire(room) for room in rooms]
        assert all(held)
        renewed = await leases.renew(held)
        await client.delete(Keys(settings.key_prefix).lease(rooms[0]))
        return renewed, await leases.renew(held)
    finally:
        await client.aclose()
