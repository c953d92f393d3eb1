"""A Redis that reaches its memory limit, across real processes: the worker rides it out as
it rides out an outage (before, kombu's OOM on its late ack was "unrecoverable" and the
worker exited), the coordinator backs off and says in /readyz that its scans fail, the CLI
says so in one line, and once memory is freed rooms run again."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess

import pytest
import redis

from parley.client import Client
from parley.processes import ProcessGroup, free_port, parley_command
from parley.shared.health import http_get
from parley.shared.models import RoomStatus
from parley.shared.settings import Settings
from tests.chaos.harness import TASK, PrivateRedis, logs_on_failure, parley_env
from tests.support.polling import wait_until
from tests.support.rooms import rotating_scripts, scripted_spec

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

MAXMEMORY = 48 * 1024 * 1024
FILLER = 1024 * 1024


def fill(client: redis.Redis, prefix: str) -> list[str]:
    """Write filler until Redis refuses it for its maxmemory, then keep Redis full whatever
    the others free meanwhile: its limit goes below what it now holds."""
    keys: list[str] = []
    with contextlib.suppress(redis.OutOfMemoryError):
        while True:
            client.set(f"{prefix}:filler:{len(keys)}", b"x" * FILLER)
            keys.append(f"{prefix}:filler:{len(keys)}")
    client.config_set("maxmemory", client.info("memory")["used_memory"] // 2)
    return keys


def free(client: redis.Redis, keys: list[str]) -> None:
    """Give the memory back and the limit its old value."""
    client.delete(*keys)
    client.config_set("maxmemory", MAXMEMORY)


def log_of(group: ProcessGroup, process: subprocess.Popen[bytes]) -> str:
    return group.logs[process.pid].read_text(errors="replace")


def readiness(port: int) -> tuple[int, dict]:
    status, body = http_get("127.0.0.1", port, "/readyz")
    return status, json.loads(body)


def test_a_worker_rides_out_a_full_redis_and_rooms_run_again_once_memory_is_freed(
        tmp_path, prefix, queue):
    health_port = free_port()
    with PrivateRedis(tmp_path, "--maxmemory", str(MAXMEMORY),
                      "--maxmemory-policy", "noeviction") as server, \
            ProcessGroup(tmp_path, parley_env(server.url, prefix, lease_ttl_s=2,
                                              scan_interval_s=0.1,
                                              worker_reconnect_max_s=0.2)) as group, \
            logs_on_failure(group):
        worker = group.worker("-Q", queue, "-c", "4", "--loglevel", "INFO")
        coordinator = group.coordinator("--health-port", str(health_port))
        settings = Settings(redis_url=server.url, key_prefix=prefix)
        client = Client(settings)
        raw = redis.Redis.from_url(server.url)
        busy = client.create_room(scripted_spec(rotating_scripts(2, 3, sleep=1.0),
                                                queue=queue))
        posted = client.post(busy, TASK)
        # A task is running: its answer and its late ack will meet the full Redis.
        wait_until(lambda: "received" in log_of(group, worker), 30, "the worker to get a task")

        filler = fill(raw, prefix)

        post = subprocess.run(parley_command("post", busy, "are you there?"),
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, **group.env})
        assert post.returncode == 2
        assert "Traceback" not in post.stderr
        (line,) = post.stderr.splitlines()
        assert line.startswith(f"parley: Redis at {server.url} is out of memory (maxmemory")
        wait_until(lambda: worker.poll() is not None
                   or "out of memory (maxmemory)" in log_of(group, worker), 60,
                   "the worker's broker connection to meet the full Redis")
        assert worker.poll() is None, "the worker exited on a full Redis"
        status, body = wait_until(lambda: (lambda r: r if r[0] == 503 else None)(
            readiness(health_port)), 30, "the coordinator's scans to be reported failing")
        assert body["down"] == ["scan"]
        assert "OutOfMemoryError" in body["checks"]["scan"]

        free(raw, filler)

        fresh = client.create_room(scripted_spec(rotating_scripts(2, 2), queue=queue))
        result = client.wait(fresh, client.post(fresh, TASK), timeout_s=60)
        assert (result.status, result.stop_reason) == (RoomStatus.IDLE, "lull")
        assert [m.sender for m in result.messages] == ["User", "agent1", "agent0"]
        wait_until(lambda: readiness(health_port)[0] == 200, 30, "the coordinator to be ready")
        assert worker.poll() is None and coordinator.poll() is None
        # The run that was going on when Redis filled up ends as it would have without.
        ended = client.wait(busy, posted, timeout_s=90)
        assert (ended.status, ended.stop_reason) == (RoomStatus.IDLE, "lull")
        assert [m.sender for m in ended.messages] == ["User", "agent1", "agent0", "agent1"]
