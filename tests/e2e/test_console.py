"""The discussion console driven by Textual's own headless pilot against real rooms: a
worker and coordinators on the real Redis, scripted agents. Typing posts, the reply streams
in under "writing…", /listen changes a card, /approve lets a tool call run, and a
coordinator killed mid-answer leaves no gap in what the console shows."""

from __future__ import annotations

import asyncio
import signal

import pytest

from parley.client import Client
from parley.console.app import DiscussionConsole
from parley.console.room_view import ASKING_YOU, LISTENING, WRITING
from parley.shared.models import RoomSpec
from parley.shared.settings import Settings
from tests.chaos.harness import PrivateRedis
from tests.e2e.test_approval_room import SAMPLE, SHORT_TTL, incident_room
from tests.support.polling import wait_until, wait_until_async
from tests.support.rooms import rotating_scripts, scripted_spec

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

SIZE = (120, 36)


def discussion(queue: str) -> RoomSpec:
    """A mention room: ana answers slowly (so her answer streams) and asks oncall; ben
    has nothing to add."""
    return RoomSpec.model_validate({
        "policy": {"kind": "mention", "everyone": ["ana", "ben"], "call_timeout_s": 20},
        "agents": [
            {"name": "ana", "role": "Investigator", "description": "Reads the logs",
             "model": "scripted", "queue": queue,
             "script": [{"content": "@oncall the disk on db-2 is full, from the audit "
                                    "logs of last night. Shall I rotate them?", "sleep": 1.5}]},
            {"name": "ben", "role": "Developer", "model": "scripted", "queue": queue,
             "script": [{"content": "(silent)"}]},
        ]})


async def type_line(pilot, app: DiscussionConsole, text: str) -> None:
    """Type ``text`` into the input and press enter."""
    app.query_one("#input").insert_text_at_cursor(text)
    await pilot.press("enter")


def notes(app: DiscussionConsole) -> list[str]:
    """The transcript's lines as the console holds them."""
    return [line.text for line in app.view.lines] if app.view else []


def drawn(app: DiscussionConsole) -> str:
    """Every line the transcript widget has drawn."""
    return "\n".join(strip.text for strip in app.query_one("#transcript").lines)


def test_typing_posts_the_reply_streams_in_and_listen_changes_a_card(
        processes, settings, queue, tmp_path):
    processes.worker("-Q", queue, "-c", "4")
    coordinators = {name: processes.coordinator("--id", name, env=SHORT_TTL)
                    for name in ("first", "second")}
    client = Client(settings)
    room = client.create_room(discussion(queue))
    app = DiscussionConsole(Client(settings), room, "oncall")

    async def scenario() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await wait_until_async(lambda: app.view is not None, 10, "the room to load", 0.05)
            await type_line(pilot, app, "@ana why is checkout slow?")
            await wait_until_async(lambda: app.view.card_state("ana") == WRITING, 20,
                                   "ana's answer to stream in", 0.02)
            assert any(line.startswith("ana writing…: @oncall") for line in app.view.writing_lines())
            # Her coordinator dies while she writes: the other one finishes the turn.
            holder = client.store.lease_holder(room) or ""
            processes.kill(coordinators[holder.split(":")[0]], signal.SIGKILL)
            await wait_until_async(lambda: any("ana: @oncall the disk" in n for n in notes(app)),
                                   30, "ana's message", 0.05)
            await pilot.pause()
            assert app.view.card_state("ana") == ASKING_YOU
            assert "  1 you: @ana why is checkout slow?" in notes(app)
            assert "ana: @oncall the disk on db-2 is full" in drawn(app)
            await type_line(pilot, app, "/listen @ben")
            await wait_until_async(lambda: app.view.card_state("ben") == LISTENING, 20,
                                   "ben's card to show him listening", 0.05)
            await pilot.pause()
            app.save_screenshot("console.svg", str(tmp_path))

    asyncio.run(scenario())
    logged = [(m.seq, m.sender) for m in client.messages(room)]
    shown = [line.split()[:2] for line in notes(app) if line[:3].strip().isdigit()]
    assert [(int(seq), who) for seq, who in shown] == [(1, "you:"), (2, "ana:")]
    assert logged == [(1, "oncall"), (2, "ana")]
    assert "ben only listens from its next turn on" in " ".join(notes(app))
    svg = (tmp_path / "console.svg").read_text()
    assert "<svg" in svg and "Investigator" in svg


def test_an_approval_is_answered_from_the_console(processes, settings, queue, tmp_path):
    runs = tmp_path / "runs.txt"
    processes.worker("-Q", queue, "-c", "4",
                     env={"PARLEY_WORKER_TOOLS": SAMPLE, "PARLEY_TEST_TOOL_RUNS": str(runs)})
    processes.coordinator()
    client = Client(settings)
    wait_until(lambda: "rollback" in client.tool_catalog(), 60, "the worker's offer")
    room = client.create_room(incident_room(queue))
    app = DiscussionConsole(Client(settings), room, "alice")

    async def scenario() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await wait_until_async(lambda: app.view is not None, 10, "the room to load", 0.05)
            await type_line(pilot, app, "checkout is down, roll it back")
            (approval,) = await wait_until_async(lambda: client.approvals(room), 30,
                                                 "the approval request", 0.05)
            await wait_until_async(
                lambda: any(f"/approve {approval.id}" in n for n in notes(app)), 10,
                "the console to ask for the approval", 0.05)
            await type_line(pilot, app, "/task @SRE look at the disk")
            await type_line(pilot, app, "/approve " + approval.id[:6])
            await wait_until_async(lambda: any("SRE: Done with it." in n for n in notes(app)),
                                   30, "the SRE's message", 0.05)
            await type_line(pilot, app, "/frobnicate")
            await wait_until_async(lambda: any("unknown command" in n for n in notes(app)), 10,
                                   "the unknown command's refusal", 0.05)
            await type_line(pilot, app, "/quit")
            await wait_until_async(lambda: not app.is_running, 10, "the console to close", 0.05)

    asyncio.run(scenario())
    said = notes(app)
    assert f"· approved rollback ({approval_id(client, room)})" in said
    (task,) = client.tasks(room)
    assert f"· task {task.id} started for SRE" in said
    assert any("rollback ok: rolled back checkout" in line for line in said)
    assert runs.read_text().splitlines() == ["rollback"]


def approval_id(client: Client, room: str) -> str:
    """The room's one answered approval's id."""
    (answered,) = client.answered_approvals(room)
    return answered.id


def test_a_redis_outage_is_said_and_the_console_follows_on_from_where_it_was(tmp_path):
    with PrivateRedis(tmp_path, "--appendonly", "yes") as server:
        settings = Settings(redis_url=server.url, key_prefix="console")
        client = Client(settings)
        room = client.create_room(scripted_spec(rotating_scripts(2, 2)))
        app = DiscussionConsole(Client(settings), room, "Ada")

        async def scenario() -> tuple[str, str]:
            async with app.run_test(size=SIZE) as pilot:
                status = app.query_one("#status")
                await wait_until_async(lambda: app.view is not None, 10, "the room to load", 0.05)
                server.stop()  # its append-only file keeps the room
                await wait_until_async(lambda: "cannot reach Redis" in str(status.render()), 15,
                                       "the status line to say Redis is gone", 0.05)
                down = str(status.render())
                await type_line(pilot, app, "/pause")
                await wait_until_async(lambda: any("cannot reach Redis" in n for n in notes(app)),
                                       15, "the command to say Redis is gone", 0.05)
                server.start()
                client.pause(room)  # written while the console waits to read again
                await wait_until_async(lambda: "· the room is paused" in notes(app), 15,
                                       "the pause, read from where the console was", 0.05)
                # Said once the read that brought the pause has returned: just after it.
                await wait_until_async(
                    lambda: "· Redis answers again: following on" in notes(app), 15,
                    "the console to say Redis answers again", 0.05)
                return down, str(status.render())

        down, after = asyncio.run(scenario())
    assert down.startswith(f"cannot reach Redis at {server.url}") and down.endswith("trying again")
    assert after == ""
    said = notes(app)
    outage = next(i for i, note in enumerate(said) if "cannot reach Redis" in note)
    assert said.index("· Redis answers again: following on") > outage
