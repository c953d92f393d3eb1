"""What a test can observe of the real processes it started, to wait on instead of
sleeping: their JSON log lines, the coordinators' scans (each opens with a heartbeat),
the Celery tasks a worker has not finished, and Redis's append-only file."""

from __future__ import annotations

import contextlib
from typing import Any

import orjson
import redis

from parley.processes import ProcessGroup
from parley.shared.keys import Keys
from parley.shared.store import now_ms
from tests.support.polling import wait_until


def log_events(group: ProcessGroup, event: str, room: str | None = None) -> list[dict[str, Any]]:
    """Every JSON log line of the group's processes that records ``event`` (about ``room``,
    when given), each process's in the order written."""
    found = []
    for path in group.logs.values():
        for line in path.read_text(errors="replace").splitlines():
            if not line.startswith("{") or f'"{event}"' not in line:
                continue
            # A process killed mid-write leaves half a line behind.
            with contextlib.suppress(orjson.JSONDecodeError):
                entry = orjson.loads(line)
                if entry.get("event") == event and room in (None, entry.get("room")):
                    found.append(entry)
    return found


def wait_for_scans(client: redis.Redis, keys: Keys, scans: int = 1, since_ms: int | None = None,
                   timeout_s: float = 30) -> None:
    """Until every coordinator that scans has finished ``scans`` whole scans begun after
    ``since_ms`` (now by default). A scan begins with a heartbeat (a new score in the
    coordinators zset) and a coordinator's scans run one after another, so the beats seen
    after ``since_ms`` number the scans begun, and all but the last are over."""
    since = now_ms() if since_ms is None else since_ms
    beats: dict[bytes, set[float]] = {}

    def scanned() -> bool:
        for coordinator, beat in client.zrange(keys.coordinators, 0, -1, withscores=True):
            if beat > since:
                beats.setdefault(coordinator, set()).add(beat)
        return bool(beats) and all(len(seen) > scans for seen in beats.values())

    wait_until(scanned, timeout_s, f"{scans} whole scan(s) of every coordinator",
               every_s=0.01)


def tasks_unfinished(broker: redis.Redis, queue: str) -> int:
    """Celery tasks of ``queue`` that no worker has finished: waiting in the queue, or taken
    and not yet acknowledged (workers acknowledge late, once the task has returned)."""
    taken = (orjson.loads(entry) for entry in broker.hvals("unacked"))
    return broker.llen(queue) + sum(1 for _, _, routing_key in taken if routing_key == queue)


def aof_written(client: redis.Redis) -> bool:
    """True when Redis has written every write it took so far to its append-only file (a
    ``kill -9`` of the server then loses none of them: the file's pages are the kernel's)."""
    info = client.info("persistence")
    return info["aof_enabled"] == 1 and info["aof_buffer_length"] == 0 and (
        info["aof_last_write_status"] == "ok")
