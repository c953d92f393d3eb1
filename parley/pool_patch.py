"""A gevent worker's monkey patching, which must come before anything imports socket or
ssl: ``import parley`` runs it first, for ``parley worker -P gevent`` (or
``PARLEY_WORKER_POOL=gevent``) only; every other command and process is left alone."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

# The pools whose workers need the standard library patched (Celery's own names).
PATCHED_POOLS = frozenset({"gevent", "eventlet"})


def is_parley(program: str) -> bool:
    """True for the ``parley`` command and ``python -m parley``: a program of the user's
    that imports parley is never patched, whatever its arguments."""
    return os.path.basename(program) == "parley" or program.endswith(
        os.path.join("parley", "__main__.py"))


def worker_pool(argv: Sequence[str], environ: Mapping[str, str]) -> str | None:
    """The pool ``parley worker`` is asked to run (-P/--pool, else PARLEY_WORKER_POOL);
    None when the command is not ``parley worker``."""
    if not argv or not is_parley(argv[0]):
        return None
    if [arg for arg in argv[1:] if not arg.startswith("-")][:1] != ["worker"]:
        return None
    for at, arg in enumerate(argv):
        if arg in ("-P", "--pool") and at + 1 < len(argv):
            return argv[at + 1]
        if arg.startswith(("--pool=", "-P")) and arg not in ("-P", "--pool"):
            return arg.split("=", 1)[1] if arg.startswith("--pool=") else arg[2:]
    return environ.get("PARLEY_WORKER_POOL")


def patch_for_pool() -> None:
    """Patch the standard library for a gevent or eventlet worker, through Celery's own
    patcher (the one ``celery worker -P gevent`` uses)."""
    pool = worker_pool(sys.argv, os.environ)
    if pool in PATCHED_POOLS:
        import celery

        celery.maybe_patch_concurrency(["-P", pool])
