"""Agent workers: the Celery app and tasks that turn an agent's model output into a bid."""
