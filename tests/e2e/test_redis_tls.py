"""A room run by real coordinator and worker processes over Redis with TLS (rediss:// for
Redis and the broker), and a worker that refuses to start on TLS settings it cannot use."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from parley.client import Client
from parley.processes import ProcessGroup
from parley.shared.settings import Settings
from tests.chaos.harness import logs_on_failure, parley_env
from tests.support.rooms import scripted_spec
from tests.support.tls import TlsRedis, make_certificates

pytestmark = [pytest.mark.e2e]


def test_a_room_runs_over_tls_with_the_ca_file(tmp_path: Path, queue: str):
    certs = make_certificates(tmp_path / "certs")
    prefix = f"parley-tls-{uuid.uuid4().hex[:8]}"
    with TlsRedis(tmp_path, certs) as server, ProcessGroup(tmp_path, parley_env(
            server.url(), prefix, redis_tls_ca_file=certs.ca, scan_interval_s=0.1)) as group, \
            logs_on_failure(group):
        group.worker("-Q", queue, "-c", "4")
        group.coordinator()
        client = Client(Settings(redis_url=server.url(), broker_url="", key_prefix=prefix,
                                 redis_tls_ca_file=str(certs.ca)))
        spec = scripted_spec({"Optimist": [{"score": 0.9, "message": "Over TLS."}],
                              "Skeptic": [{"score": 0.1, "message": ""}]}, queue=queue)

        result = client.run(spec, "Does it work over TLS?", timeout_s=60)

    assert [(m.sender, m.content) for m in result.messages] == [
        ("User", "Does it work over TLS?"), ("Optimist", "Over TLS.")]


def test_a_worker_refuses_to_start_on_a_ca_file_it_cannot_read(tmp_path: Path, queue: str):
    missing = tmp_path / "no-such-ca.pem"
    env = parley_env("rediss://localhost:6380/0", "parley-tls-refused",
                     redis_tls_ca_file=missing)
    with ProcessGroup(tmp_path, env) as group:
        worker = group.worker("-Q", queue)
        try:
            worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail("the worker started with a CA file that does not exist")
        log = group.logs[worker.pid].read_text(errors="replace")

    assert worker.returncode == 2
    (line,) = log.splitlines()
    assert line.startswith("parley: ")
    assert f"PARLEY_REDIS_TLS_CA_FILE={missing}: no such file" in line
