"""The installed parley package's version: a leaf module, for the CLI and the API alike."""

from __future__ import annotations

from importlib import metadata


def package_version() -> str:
    """The installed parley package's version."""
    try:
        return metadata.version("parley")
    except metadata.PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"
