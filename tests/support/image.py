"""What the Dockerfile builds the image from, for the tests that check or rebuild it."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import dockerfile as dockerfile_parser
import pytest

ROOT = Path(__file__).parents[2]


def dockerfile() -> list[dockerfile_parser.Command]:
    """The Dockerfile's instructions, as BuildKit's parser reads them."""
    return list(dockerfile_parser.parse_file(str(ROOT / "Dockerfile")))


def final_stage() -> list[dockerfile_parser.Command]:
    """The instructions of the image's last stage (the one that runs)."""
    commands = dockerfile()
    start = max(i for i, command in enumerate(commands) if command.cmd == "FROM")
    return commands[start:]


def dockerfile_sources() -> set[str]:
    """What the Dockerfile copies from the build context (not from another stage)."""
    return {source.rstrip("/") for command in dockerfile()
            if command.cmd == "COPY" and not any(f.startswith("--from") for f in command.flags)
            for source in command.value[:-1]}


def dev_tool(name: str) -> Path:
    """A tool the dev extra installs beside this interpreter (or one on the PATH); the
    test skips without it."""
    beside = Path(sys.executable).parent / name
    found = beside if beside.exists() else shutil.which(name)
    if not found:
        pytest.skip(f"{name} is not installed: pip install -e '.[dev]' installs it")
    return Path(found)
