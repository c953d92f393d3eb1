"""The tool catalog with real worker processes: a worker is in it, under its node name,
from when it is ready until it stops (at once on a warm shutdown, within three publish
intervals when killed), and it lists the tools of its PARLEY_WORKER_TOOLS modules."""

from __future__ import annotations

import json

import pytest

from parley import processes as procs
from parley.client import Client
from parley.shared.settings import Settings
from tests.support.commands import run_parley
from tests.support.polling import wait_until
from tests.support.rooms import scripted_spec

pytestmark = [pytest.mark.e2e, pytest.mark.redis]
WORKER_START_S = 60


def test_a_worker_is_in_the_catalog_while_it_runs_and_leaves_it_when_stopped(
        processes: procs.ProcessGroup, settings: Settings, queue: str):
    client = Client(settings)
    worker = processes.worker("-Q", queue, "-c", "2")

    [worker_id] = wait_until(client.tool_workers, WORKER_START_S, "the worker's offer")
    assert worker_id.startswith("parley@") and worker_id.endswith(f"-{worker.pid}")
    assert client.tool_catalog() == {}  # it offers no tools

    assert procs.stop(worker) == 0  # SIGTERM: a warm shutdown
    # Gone at once, not when the offer would have expired (three 5 s intervals).
    assert client.tool_workers() == []
    assert not client.redis.exists(client.store.keys.tool_worker(worker_id))
    assert client.redis.zrange(client.store.keys.tool_workers, 0, -1) == []


def test_a_killed_worker_leaves_the_catalog_when_its_offer_expires(
        processes: procs.ProcessGroup, settings: Settings, queue: str):
    client = Client(settings)
    worker = processes.worker("-Q", queue, "-c", "2",
                              env={"PARLEY_WORKER_CATALOG_INTERVAL_S": "0.5"})
    [worker_id] = wait_until(client.tool_workers, WORKER_START_S, "the worker's offer")

    processes.kill(worker)  # SIGKILL: nothing withdraws the offer
    # Refreshed every 0.5 s for 1.5 s: it outlives the worker by at least a second.
    assert client.tool_workers() == [worker_id]
    wait_until(lambda: client.tool_workers() == [], 10, "the killed worker's offer to expire")


def test_a_worker_offers_its_tool_modules_and_rooms_may_name_only_those(
        processes: procs.ProcessGroup, settings: Settings, queue: str, tmp_path):
    client = Client(settings)
    processes.worker("-Q", queue, "-c", "2",
                     env={"PARLEY_WORKER_TOOLS": "tests.support.tool_modules.ops_tools"})

    catalog = wait_until(client.tool_catalog, WORKER_START_S, "the worker's tools")
    assert {"search_logs", "rollback"} <= set(catalog)
    assert catalog["search_logs"].description.startswith("Search a service's logs.")
    assert "service" in json.dumps(catalog["search_logs"].parameters)

    # Intent bids: a full-mode bid room runs no tools, and is refused before the catalog.
    spec = scripted_spec({"Investigator": [{"content": "x"}], "SRE": [{"content": "y"}]},
                         queue=queue, bid_mode="intent")  # a full bid runs no tools
    investigator = spec.agents[0].model_copy(update={"tools": ["search_logs"]})
    assert client.create_room(spec.model_copy(update={"agents": [investigator, spec.agents[1]]}))

    unknown = investigator.model_copy(update={"tools": ["search_logs", "read_metrics"]})
    path = tmp_path / "room.json"
    path.write_text(spec.model_copy(update={"agents": [unknown, spec.agents[1]]})
                    .model_dump_json())
    refused = run_parley(processes.env, "rooms", "create", str(path))
    assert refused.returncode == 2
    assert refused.stderr == ("parley: agent 'Investigator' names tool 'read_metrics', which no "
                              "live worker offers (see parley tools)\n")
