"""What the Celery workers are doing, as an operator used to Flower looks first: each
worker's active and reserved tasks and queues, and how many tasks wait in each queue."""

from __future__ import annotations

import threading
import time
from typing import Any

from celery import Celery
from kombu.exceptions import OperationalError

from parley.coordinator.transport import CeleryTransport
from parley.shared.protocol import DEFAULT_QUEUE
from parley.shared.settings import Settings

# A task's fields worth showing (its kwargs are the request's short summary, never the
# transcript).
TASK_FIELDS = ("id", "name", "kwargs", "time_start", "worker_pid", "acknowledged")


class WorkersView:
    """Asks the workers through the broker (Celery's remote control), with a short timeout,
    and keeps the answer for ``cache_s`` so that many dashboards cost one broadcast."""

    def __init__(self, settings: Settings, timeout_s: float = 1.0, cache_s: float = 2.0
                 ) -> None:
        self.app: Celery = CeleryTransport(settings.broker_url, timeout_s=timeout_s,
                                           settings=settings).app
        self.timeout_s = timeout_s
        self.cache_s = cache_s
        self.lock = threading.Lock()
        self.last: tuple[float, dict[str, Any]] | None = None
        # What the broker's transport raises when it cannot be reached (redis-py's errors
        # for a Redis broker, amqp's for RabbitMQ), and kombu's own.
        self.connection_errors: tuple[type[BaseException], ...] = (
            *self.app.connection_for_read().connection_errors, OperationalError, OSError)

    def read(self) -> dict[str, Any]:
        """``{"workers": [...], "queues": [{"name", "depth"}]}``, at most ``cache_s`` old."""
        with self.lock:
            if self.last is None or time.monotonic() - self.last[0] > self.cache_s:
                self.last = (time.monotonic(), self.inspect_once_more())
            return self.last[1]

    def inspect_once_more(self) -> dict[str, Any]:
        """inspect(), asked again once when the broker's connection fails: after the broker
        restarted, the connection kept from before is dead, and a new one answers."""
        try:
            return self.inspect()
        except self.connection_errors:
            return self.inspect()

    def inspect(self) -> dict[str, Any]:
        """One broadcast to find the workers, then their tasks and queues (each answered
        as soon as every worker found has replied)."""
        names = sorted(self.app.control.inspect(timeout=self.timeout_s).ping() or {})
        if not names:
            return {"workers": [], "queues": self.queue_depths({DEFAULT_QUEUE})}
        ask = self.app.control.inspect(destination=names, timeout=self.timeout_s,
                                       limit=len(names))
        active, reserved = ask.active() or {}, ask.reserved() or {}
        queues, stats = ask.active_queues() or {}, ask.stats() or {}
        workers = [worker_row(name, active.get(name), reserved.get(name), queues.get(name),
                              stats.get(name)) for name in names]
        served = {queue for worker in workers for queue in worker["queues"]}
        return {"workers": workers, "queues": self.queue_depths(served | {DEFAULT_QUEUE})}

    def queue_depths(self, names: set[str]) -> list[dict[str, Any]]:
        """How many tasks wait in each queue, from the broker (None when it cannot say)."""
        depths = []
        with self.app.connection_for_read() as connection:
            for name in sorted(names):
                channel = connection.channel()
                try:
                    _, depth, _ = channel.queue_declare(queue=name, passive=True)
                except Exception:  # noqa: BLE001 - a queue nobody declared yet holds nothing
                    depth = 0
                finally:
                    channel.close()
                depths.append({"name": name, "depth": depth})
        return depths


def worker_row(name: str, active: list[dict[str, Any]] | None,
               reserved: list[dict[str, Any]] | None, queues: list[dict[str, Any]] | None,
               stats: dict[str, Any] | None) -> dict[str, Any]:
    """One worker as /workers shows it."""
    stats = stats or {}
    pool = stats.get("pool") or {}
    return {"name": name,
            "active": [task_row(task) for task in active or []],
            "reserved": [task_row(task) for task in reserved or []],
            "queues": sorted(queue.get("name", "") for queue in queues or []),
            "concurrency": pool.get("max-concurrency"),
            "processed": sum((stats.get("total") or {}).values()),
            "pid": stats.get("pid")}


def task_row(task: dict[str, Any]) -> dict[str, Any]:
    """The fields of one task worth showing."""
    return {name: task.get(name) for name in TASK_FIELDS}
