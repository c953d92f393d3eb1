"""The HTTP API on fakeredis, for the unit tests of its routes: a TestClient over one
fakeredis server, and rooms run in process as a coordinator would run them."""

from __future__ import annotations

import asyncio
import subprocess
import urllib.request

import fakeredis
from fastapi.testclient import TestClient

from parley.api.app import make_app
from parley.client import Client
from parley.processes import ProcessGroup
from parley.shared.keys import Keys
from parley.shared.settings import Settings
from parley.shared.store import RoomStore
from tests.support.fake_turns import serve_once
from tests.support.local_worker import LocalWorkerTransport
from tests.support.polling import wait_until
from tests.support.rooms import rotating_scripts, scripted_spec

PREFIX = "t"
TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
# A loopback name: without tokens the API answers no other Host.
BASE_URL = "http://127.0.0.1"


def spec_json(turns: int = 2, **policy) -> dict:
    """A scripted bid room that ends after ``turns`` turns."""
    return scripted_spec(rotating_scripts(2, turns), max_messages=turns + 1,
                         **policy).model_dump(mode="json")


def app_client(server: fakeredis.FakeServer, **options) -> TestClient:
    """A TestClient of the API on ``server`` under the test's prefix."""
    settings = Settings(key_prefix=PREFIX, **options)
    client = Client(settings)
    client.redis = fakeredis.FakeRedis(server=server)
    client.store = RoomStore(client.redis, Keys(PREFIX))
    return TestClient(make_app(settings, client, fakeredis.FakeAsyncRedis(server=server)),
                      base_url=BASE_URL)


def run_room(server, room: str) -> None:
    """One coordinator's take of the room, in process: turns until it goes idle."""
    asyncio.run(serve_once(fakeredis.FakeAsyncRedis(server=server), Keys(PREFIX),
                           LocalWorkerTransport(fakeredis.FakeRedis(server=server), Keys(PREFIX)),
                           room=room))


def api_answers(url: str) -> bool:
    """True once the API at ``url`` answers /healthz with 200."""
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def wait_for_api(server: subprocess.Popen[bytes], url: str, processes: ProcessGroup) -> None:
    """Wait until the ``parley api`` process ``server`` answers at ``url``; fail with the
    processes' logs if it exits first."""

    def answers() -> bool:
        assert server.poll() is None, processes.log_tail()
        return api_answers(url)

    wait_until(answers, 30, "the API to answer")
