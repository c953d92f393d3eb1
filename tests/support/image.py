"""What the Dockerfile builds the image from, for the tests that check or rebuild it."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


def dockerfile_sources() -> set[str]:
    """What the Dockerfile copies from the build context (not from another stage)."""
    sources = set()
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
            sources.update(word.rstrip("/") for word in words[1:-1])
    return sources


def dev_tool(name: str) -> Path:
    """A tool the dev extra installs beside this interpreter (or one on the PATH); the
    test skips without it."""
    beside = Path(sys.executable).parent / name
    found = beside if beside.exists() else shutil.which(name)
    if not found:
        pytest.skip(f"{name} is not installed: pip install -e '.[dev]' installs it")
    return Path(found)
