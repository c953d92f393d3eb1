"""A module whose tool has the name of one in sample.py."""

import parley


@parley.tool
def lookup(service: str) -> str:
    """Another lookup."""
    return service
