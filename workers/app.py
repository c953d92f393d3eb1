"""The workers' Celery app. Start it with ``parley worker``."""

from __future__ import annotations

import threading

from celery import Celery
from celery.signals import worker_ready

from shared.settings import get_settings

settings = get_settings()

app = Celery("parley", broker=settings.broker_url, include=["workers.tasks"])
app.conf.update(
    task_default_queue="parley.agents",
    # Acks late: a worker killed mid-task gets its message redelivered, and the task's
    # expiry (the turn's deadline) drops it if that is too late to matter.
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    task_ignore_result=True,
    # Bids are written to Redis streams; Celery's result backend is never read.
    result_backend=None,
    worker_prefetch_multiplier=1,
    broker_transport_options={"visibility_timeout": settings.task_visibility_timeout_s},
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    worker_send_task_events=False,
    task_send_sent_event=False,
)


@worker_ready.connect
def preload_litellm(**_: object) -> None:
    """Import litellm in the background: it takes seconds, and the first real call would
    otherwise pay for it inside its bid deadline. Scripted-only workers can skip it."""
    if settings.worker_preload_litellm:
        threading.Thread(target=_import_litellm, name="preload-litellm", daemon=True).start()


def _import_litellm() -> None:
    import litellm  # noqa: F401
