"""A Redis at its memory limit, to the worker's broker connection and to the CLI: a refused
ack is a lost connection (which Celery rides out), not a channel error (which stops the
worker), and a command that writes is one line naming maxmemory."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import kombu
import pytest
import redis
import yaml

from parley.processes import free_port, parley_command, start_redis, stop
from parley.workers.app import RedisTransport
from tests.e2e.test_full_redis import MAXMEMORY, fill
from tests.support.rooms import scripted_spec

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None,
                                reason="redis-server is not installed")


@pytest.fixture
def full_redis(tmp_path: Path, prefix: str) -> Iterator[str]:
    """The URL of a redis-server of this test's own, filled to its maxmemory once the test
    calls the fixture's ``fill``; stopped by its PID."""
    port = free_port()
    server = start_redis(port, tmp_path, "--maxmemory", str(MAXMEMORY),
                         "--maxmemory-policy", "noeviction")
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        stop(server)


def test_an_ack_a_full_redis_refuses_is_a_lost_broker_connection(full_redis, prefix):
    with kombu.Connection(full_redis, transport=RedisTransport) as connection:
        queue = connection.SimpleQueue(f"{prefix}-q")
        queue.put({"call": 1})
        message = queue.get(timeout=5)
        fill(redis.Redis.from_url(full_redis), prefix)

        with pytest.raises(connection.connection_errors, match=r"out of memory \(maxmemory\)"):
            message.ack()
        queue.close()


def test_a_command_that_writes_into_a_full_redis_is_one_line_and_exit_2(full_redis, prefix,
                                                                       tmp_path):
    spec = tmp_path / "room.yaml"
    spec.write_text(yaml.safe_dump(scripted_spec({"A": [], "B": []}).model_dump(mode="json")))
    fill(redis.Redis.from_url(full_redis), prefix)

    done = subprocess.run(parley_command("rooms", "create", str(spec)), capture_output=True,
                          text=True, timeout=60,
                          env={**os.environ, "PARLEY_REDIS_URL": full_redis,
                               "PARLEY_KEY_PREFIX": prefix})

    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr == (f"parley: Redis at {full_redis} is out of memory (maxmemory "
                           "reached) and refuses writes until memory is freed: raise its "
                           "maxmemory or free some (redis-cli INFO memory)\n")
