"""The Python client: Client, the results it returns, following a room, the speak queue."""

from parley.client.client import Client
from parley.client.results import RoomDetails, RunResult, RunTimeout, StreamReport
from parley.client.spec_file import load_spec

__all__ = ["Client", "RoomDetails", "RunResult", "RunTimeout", "StreamReport", "load_spec"]
