"""A three-node Redis Cluster on loopback, on free ports, for the tests that run rooms on
one: started with redis-server's cluster mode and ``redis-cli --cluster create``, each node
stopped by its PID."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import redis

from parley import processes
from tests.support.polling import wait_until

NODES = 3


class LocalCluster:
    """Three master nodes sharing the 16,384 slots, no replicas."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory / "redis-cluster"
        self.ports = [processes.free_port() for _ in range(NODES)]
        self.nodes: list[subprocess.Popen[bytes]] = []

    def url(self) -> str:
        """One node's URL: a cluster client finds the others from it."""
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def __enter__(self) -> LocalCluster:
        missing = [tool for tool in ("redis-server", "redis-cli") if shutil.which(tool) is None]
        if missing:
            pytest.skip(f"a Redis Cluster needs {' and '.join(missing)}, which is not installed")
        try:
            for port in self.ports:
                node_dir = self.directory / str(port)
                node_dir.mkdir(parents=True, exist_ok=True)
                self.nodes.append(processes.start_redis(
                    port, node_dir, "--cluster-enabled", "yes",
                    "--cluster-port", str(processes.free_port()),
                    "--cluster-config-file", str(node_dir / "nodes.conf")))
            subprocess.run(["redis-cli", "--cluster", "create",
                            *(f"127.0.0.1:{port}" for port in self.ports),
                            "--cluster-replicas", "0", "--cluster-yes"],
                           check=True, capture_output=True, timeout=60)
            self.wait_until_ok()
        except BaseException:
            self.__exit__()
            raise
        return self

    def wait_until_ok(self, timeout_s: float = 30) -> None:
        """Until every node says the cluster is ok (the slots are known everywhere)."""

        def every_node_ok() -> bool:
            infos = [redis.Redis(port=port).execute_command("CLUSTER", "INFO")
                     for port in self.ports]
            return all(b"cluster_state:ok" in info for info in infos)

        wait_until(every_node_ok, timeout_s, f"the cluster on ports {self.ports} to be ok", 0.1)

    def __exit__(self, *exc_info: object) -> None:
        for node in self.nodes:
            processes.stop(node)
