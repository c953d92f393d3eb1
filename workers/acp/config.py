"""The workers' ACP profiles file (``PARLEY_WORKER_ACP_CONFIG``), read and checked as the
worker starts::

    {"agents": {"claude": {"command": ["npx", "--no-install", "claude-agent-acp"],
                           "cwd": "/srv/checkout", "env": {"ANTHROPIC_API_KEY": "${KEY}"},
                           "max_sessions": 8}}}

A spec names a profile (``model: acp/claude``); only this file gives a command. The
process gets the profile's ``env`` and nothing of the worker's own environment but what it
needs to start (PATH, HOME, USER, ...): ``${NAME}`` in a value is the worker's variable
NAME, so a secret reaches an agent only when its profile names it. A file that cannot be
used is one line naming what is wrong, never a value (an env value may be a secret).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from parley.shared.models import ACP_QUEUE_PREFIX

PROFILE_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class AcpConfigError(ValueError):
    """The profiles file cannot be used: the one line the worker says before it refuses to
    start."""


class AcpProfile(BaseModel):
    """One external agent: the process to start, where, with what environment, and how many
    sessions (rooms' agents) it may hold on one worker at once."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: list[str] = Field(min_length=1)
    cwd: str = "."
    # Never in a repr or a log line: values may be secrets.
    env: dict[str, str] = Field(default_factory=dict, repr=False)
    max_sessions: int = Field(default=8, ge=1, le=1024)

    def environment(self) -> dict[str, str]:
        """The profile's env with each ``${NAME}`` replaced by the worker's variable."""
        return {name: REFERENCE.sub(lambda m: os.environ.get(m.group(1), ""), value)
                for name, value in self.env.items()}


class AcpConfig(BaseModel):
    """Every profile, by name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agents: dict[str, AcpProfile] = Field(default_factory=dict)


def read_acp_config(path: str) -> AcpConfig:
    """The profiles of ``path`` (an empty config for ``""``); AcpConfigError otherwise."""
    if not path:
        return AcpConfig()
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise AcpConfigError(f"PARLEY_WORKER_ACP_CONFIG {path}: cannot be read as JSON "
                             f"({type(error).__name__})") from None
    try:
        config = AcpConfig.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the file"
        raise AcpConfigError(f"PARLEY_WORKER_ACP_CONFIG {path}: {where}: {first['msg']}") from None
    bad = next((name for name in config.agents if not PROFILE_NAME.fullmatch(name)), None)
    if bad is not None:
        raise AcpConfigError(f"PARLEY_WORKER_ACP_CONFIG {path}: profile {bad!r} must be 1-64 "
                             "letters, digits, '_' or '-'")
    missing = next((name for name, profile in config.agents.items()
                    if not Path(profile.cwd).is_dir()), None)
    if missing is not None:
        raise AcpConfigError(f"PARLEY_WORKER_ACP_CONFIG {path}: profile {missing!r}: cwd is "
                             "not a directory")
    return config


def acp_queues(path: str) -> list[str]:
    """The queues of the profiles in ``path``, which a worker running them consumes."""
    return [ACP_QUEUE_PREFIX + name for name in read_acp_config(path).agents]
