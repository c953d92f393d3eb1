"""`parley worker -P gevent` patches the standard library before anything imports it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from parley.pool_patch import worker_pool


@pytest.mark.parametrize(("argv", "pool"), [
    (["parley", "worker", "-P", "gevent"], "gevent"),
    (["parley", "worker", "-Pgevent", "-c", "2000"], "gevent"),
    (["parley", "worker", "--pool=gevent"], "gevent"),
    (["parley", "worker", "--pool", "threads"], "threads"),
    (["parley", "worker", "-c", "8"], "prefork-from-env"),
    (["parley", "run", "worker.yaml", "-P", "gevent"], None),
    (["/venv/lib/python3.11/site-packages/parley/__main__.py", "worker", "-P", "gevent"],
     "gevent"),
    (["pytest", "-q", "tests/unit"], None),
    (["myapp.py", "worker", "-P", "gevent"], None),  # a program of the user's importing parley
])
def test_the_pool_is_read_from_the_worker_command_or_its_setting(argv, pool):
    assert worker_pool(argv, {"PARLEY_WORKER_POOL": "prefork-from-env"}) == pool


def test_a_gevent_worker_is_patched_before_parley_imports_a_socket():
    code = ("import sys; sys.argv = ['parley', 'worker', '-P', 'gevent']; import parley, "
            "socket, gevent.monkey; print(gevent.monkey.is_module_patched('socket'))")
    done = subprocess.run([sys.executable, "-W", "error::Warning", "-c", code],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.strip() == "True", done.stderr[-2000:]
