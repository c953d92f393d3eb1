"""A Client over a fresh fakeredis server, for unit tests of what reads and writes rooms
through it (the CLI, the views)."""

from __future__ import annotations

import fakeredis
import pytest

from parley import cli
from parley.client import Client
from parley.shared.keys import Keys
from parley.shared.settings import Settings
from parley.shared.store import RoomStore


def fake_client(settings: Settings | None = None) -> Client:
    """A Client whose Redis is a new fakeredis server, under the settings' key prefix."""
    settings = settings or Settings(key_prefix="t")
    fake = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    client = Client(settings)
    client.redis = fake
    client.store = RoomStore(fake, Keys(settings.key_prefix))
    return client


def cli_on_fake_client(monkeypatch: pytest.MonkeyPatch, settings: Settings | None = None) -> Client:
    """A fake_client that every CLI command of the test connects to."""
    client = fake_client(settings)
    monkeypatch.setattr(cli.common, "Client", lambda: client)
    return client
