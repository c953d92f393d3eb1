"""A worker and a coordinator given a Redis URL with a password never write the password:
not at start-up, not while they fail to log in."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from parley.processes import ProcessGroup
from tests.chaos.harness import PrivateRedis, logs_on_failure, parley_env
from tests.support.polling import wait_until

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(shutil.which("redis-server") is None,
                                 reason="redis-server is not installed")]

PASSWORD = "s3cret-right"
WRONG = "s3cret-wrong"


def test_workers_and_coordinators_mask_the_redis_password(tmp_path: Path, prefix: str):
    with PrivateRedis(tmp_path, "--requirepass", PASSWORD) as server:
        wrong_url = f"redis://:{WRONG}@127.0.0.1:{server.port}/0"
        with ProcessGroup(tmp_path, parley_env(wrong_url, prefix)) as group, \
                logs_on_failure(group):
            worker = group.worker()
            coordinator = group.coordinator()

            def log_of(process) -> str:  # noqa: ANN001
                path = group.logs[process.pid]
                return path.read_text(errors="replace") if path.exists() else ""

            wait_until(lambda: "Cannot connect to" in log_of(worker), 60,
                       "the worker to report that it cannot log in")
            wait_until(lambda: "scan_failed" in log_of(coordinator), 60,
                       "the coordinator to report that it cannot log in")
            worker_log, coordinator_log = log_of(worker), log_of(coordinator)
    for log in (worker_log, coordinator_log):
        assert "s3cret" not in log
    # Celery masks its banner and its reconnect errors with '**'; parley with '***'.
    assert f"://:**@127.0.0.1:{server.port}/0" in worker_log
    assert f'"redis": "redis://:***@127.0.0.1:{server.port}/0"' in coordinator_log
