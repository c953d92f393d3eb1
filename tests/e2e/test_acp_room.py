"""An external agent over ACP in a discussion room, across real processes: a `parley
worker` running the test agent's profile (tests/support/acp_agent.py, written with the
agent-client-protocol package), a `parley coordinator`, people posting and approving, and
`parley listen`. One set of processes serves the whole file."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from parley.client import Client
from parley.console.room_view import RoomView
from parley.processes import ProcessGroup
from parley.shared.events import MessageChunk, MessageCommitted
from parley.shared.models import AnswerStatus, CallKind, RoomSpec, StopReason, ToolCallStatus
from parley.shared.settings import Settings
from parley.shared.tool_catalog import ToolsRefused
from tests.conftest import REDIS_URL
from tests.support.commands import run_parley
from tests.support.polling import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

AGENT = Path(__file__).parents[1] / "support" / "acp_agent.py"
SESSION = re.compile(r"^session (\w+) prompt (\d+):")
# The profile's queue is the same on every worker of a broker: a profile of each test
# process's own (xdist runs this file in several), so their workers take no call of another's.
PROFILE = f"dev{uuid.uuid4().hex[:6]}"


class Deployment:
    """The file's processes, its client and the agent's working directory."""

    def __init__(self, processes: ProcessGroup, client: Client, workdir: Path,
                 worker_env: dict[str, str], queue: str) -> None:
        self.processes = processes
        self.client = client
        self.workdir = workdir
        self.worker_env = worker_env
        self.queue = queue
        self.worker = self.start_worker()

    def start_worker(self) -> subprocess.Popen[bytes]:
        """A worker running the test agent's profile (and the scripted agents' queue)."""
        return self.processes.worker("-Q", self.queue, "-c", "4", env=self.worker_env)

    def prompts(self) -> str:
        """Every prompt the agent read, as it logged them."""
        return (self.workdir / "prompts.log").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    base = tmp_path_factory.mktemp("acp")
    workdir = base / "workspace"
    workdir.mkdir()
    config = base / "acp.json"
    config.write_text(json.dumps({"agents": {PROFILE: {
        "command": [sys.executable, str(AGENT)], "cwd": str(workdir),
        "env": {"PYTHONPATH": str(Path(__file__).parents[2]), "PROFILE_TOKEN": "given"}}}}))
    prefix = f"parley-test-{uuid.uuid4().hex[:10]}"
    env = {"PARLEY_REDIS_URL": REDIS_URL, "PARLEY_BROKER_URL": REDIS_URL,
           "PARLEY_KEY_PREFIX": prefix, "PARLEY_WORKER_PRELOAD_LITELLM": "false",
           "PARLEY_LOG_FORMAT": "json", "PARLEY_SCAN_INTERVAL_S": "0.1",
           "PARLEY_HEALTH_PORT": "0"}
    worker_env = {"PARLEY_WORKER_ACP_CONFIG": str(config), "WORKER_SECRET": "hidden"}
    with ProcessGroup(base, env) as processes:
        client = Client(Settings(redis_url=REDIS_URL, key_prefix=prefix))
        deployment = Deployment(processes, client, workdir, worker_env,
                                f"parley-test-{uuid.uuid4().hex[:8]}")
        processes.coordinator()
        wait_until(lambda: PROFILE in client.acp_profiles(), 60, "the worker's ACP profile")
        yield deployment


def discussion(queue: str, call_timeout_s: float = 60) -> RoomSpec:
    """A mention room: a scripted lead nobody asks, and dev, the test agent."""
    return RoomSpec.model_validate({
        "name": "incident", "approvers": ["alice"], "approval_timeout_s": 30,
        "policy": {"kind": "mention", "call_timeout_s": call_timeout_s},
        "agents": [{"name": "lead", "model": "scripted", "queue": queue, "script": []},
                   {"name": "dev", "model": f"acp/{PROFILE}", "role": "developer",
                    "description": "reads the source code",
                    "instructions": "You are @dev. Answer briefly."}]})


def ask(client: Client, room: str, text: str) -> str:
    """Post as alice and return dev's answer to it."""
    posted = client.post(room, text, sender="alice")
    result = client.wait(room, posted, timeout_s=60)
    asked = max(m.seq for m in result.messages if m.content == text)
    (answer,) = [m.content for m in result.messages if m.sender == "dev" and m.seq > asked]
    return answer


def session_of(answer: str) -> tuple[str, int]:
    match = SESSION.match(answer)
    assert match, answer
    return match.group(1), int(match.group(2))


def test_dev_answers_across_two_runs_in_one_session(deployment):
    client = deployment.client
    room = client.create_room(discussion(deployment.queue))

    first = ask(client, room, "@dev why do Canadian checkouts fail? use a tool")
    second = ask(client, room, "@dev and is the env clean?")

    session, number = session_of(first)
    assert session_of(second) == (session, number + 1)
    assert "grep found 3 matches" in first
    # Only the profile's environment, and what a process needs to start.
    assert "PROFILE_TOKEN" in second and "WORKER_SECRET" not in second
    prompts = deployment.prompts()
    assert prompts.count("Your instructions for this room:\nYou are @dev.") == 1
    assert "=== parley: the room's notes for your turn ===" in prompts
    assert "Asked for this turn by: alice." in prompts
    (call,) = [c for record in client.turns(room) for answer in record.bids
               if answer.agent == "dev" for c in answer.tool_calls]
    assert (call.tool, call.arguments, call.status, call.result) == (
        "grep", {"pattern": "tax"}, ToolCallStatus.OK, "3 matches")
    chunks = [e for e in client.store.read_events(room) if e.type == "message_chunk"]
    assert len(chunks) > 2


def test_a_permission_approved_and_one_denied(deployment):
    client = deployment.client
    room = client.create_room(discussion(deployment.queue))
    for approve, said in ((True, "permission granted"), (False, "permission refused")):
        posted = client.post(room, "@dev may you ask permission?", sender="alice")
        (approval,) = wait_until(lambda: client.approvals(room), 60, "the permission request")
        assert (approval.agent, approval.tool) == ("dev", "write notes.txt")
        client.approve(room, approval.id, approve=approve, by="alice")
        result = client.wait(room, posted, timeout_s=60)
        assert said in [m.content for m in result.messages if m.sender == "dev"][-1]


def test_parley_listen_cancels_the_running_prompt(deployment):
    client = deployment.client
    room = client.create_room(discussion(deployment.queue))
    posted = client.post(room, "@dev please be slow", sender="alice")
    wait_until(lambda: any(e.type == "message_chunk" and "working" in json.dumps(e.model_dump())
                           for e in client.store.read_events(room)), 60, "dev writing")

    listened = run_parley(deployment.processes.env, "listen", room, "dev")
    assert listened.returncode == 0, listened.stderr
    result = client.wait(room, posted, timeout_s=60)

    assert not [m for m in result.messages if m.sender == "dev"]
    assert any(answer.agent == "dev" and answer.error.startswith("cut:")
               for record in client.turns(room) for answer in record.bids)
    # The prompt ended in the agent: its session takes the next turn a person gives it.
    session, number = session_of(ask(client, room, "@dev are you there?"))
    assert number >= 2


def test_a_restarted_worker_starts_a_new_session_with_the_history(deployment):
    client = deployment.client
    room = client.create_room(discussion(deployment.queue))
    before, _ = session_of(ask(client, room, "@dev remember the tax engine"))
    deployment.processes.kill(deployment.worker)
    deployment.worker = deployment.start_worker()

    after, number = session_of(ask(client, room, "@dev what did I ask first?"))

    assert after != before and number == 1
    newest = deployment.prompts().rsplit(f"--- session {after}\n", 1)[1]
    assert "What was said in the room since you last read it:" in newest
    assert "remember the tax engine" in newest
    assert newest.count("Your instructions for this room:") == 1


def test_a_turn_asked_again_after_its_agent_died_midway_streams_its_text_anew(deployment):
    client = deployment.client
    room = client.create_room(discussion(deployment.queue))

    answer = ask(client, room, "@dev please die")

    chunks = [e for e in client.store.read_events(room)
              if isinstance(e, MessageChunk) and e.agent == "dev"]
    failed = chunks[:[c.index for c in chunks].index(0, 1)]
    assert (deployment.workdir / "died").exists() and failed and answer.endswith("done.")
    assert session_of(failed[0].text)[0] != session_of(answer)[0]
    # What a follower shows is the answer, nothing of the failed attempt glued before it.
    view = RoomView(room, discussion(deployment.queue), "alice")
    for chunk in chunks:
        view.see_event(chunk)
    assert view.writing_lines() == [f"dev writing…: {answer}"]


def test_a_turn_past_its_deadline_is_asked_again_with_nothing_of_the_first_attempt(deployment):
    client = deployment.client
    # Long enough for a new session to start on a loaded machine: its start counts.
    room = client.create_room(discussion(deployment.queue, call_timeout_s=8))

    answer = ask(client, room, "@dev please stall")
    asked_seq = len(client.messages(room)) - 1

    session, number = session_of(answer)
    # The first attempt ran past its deadline: what it wrote on its way out is not the
    # second attempt's.
    assert (deployment.workdir / "stalled").exists() and answer == \
        f"session {session} prompt {number}: done."
    chunks = [e for e in client.store.read_events(room)
              if isinstance(e, MessageChunk) and e.agent == "dev"]
    assert not [c for c in chunks if "wrapping up" in c.text]
    assert [c.index for c in chunks].count(0) == 2 and "working" in chunks[1].text
    # The first attempt's failure is read before the second's text: a follower shows that.
    view = RoomView(room, discussion(deployment.queue), "alice")
    for event in client.store.read_events(room):
        if isinstance(event, MessageCommitted) and event.seq > asked_seq:
            break
        view.see_event(event)
    assert view.writing_lines() == [f"dev writing…: {answer}"]


def test_a_spec_naming_a_profile_no_worker_runs_is_refused(deployment):
    spec = discussion(deployment.queue).model_dump()
    spec["agents"][1]["model"] = "acp/nobody"
    with pytest.raises(ToolsRefused, match="^agent 'dev' runs ACP profile 'nobody', which no "
                                           "live worker runs"):
        deployment.client.create_room(RoomSpec.model_validate(spec))


def test_a_selector_room_gives_its_acp_participant_its_turns_from_one_session(deployment):
    client = deployment.client
    spec = RoomSpec.model_validate({
        "name": "selector", "policy": {"kind": "selector", "max_turns": 4, "call_timeout_s": 60,
                                       "selector": {"model": "scripted", "queue": deployment.queue,
                                                    "script": [{"content": pick} for pick in
                                                               ("dev", "lead", "dev", "TERMINATE")]}},
        "agents": [{"name": "lead", "model": "scripted", "queue": deployment.queue,
                    "script": [{"content": "lead: ship the fix"}]},
                   {"name": "dev", "model": f"acp/{PROFILE}"}]})
    room = client.create_room(spec)

    result = client.wait(room, client.post(room, "What is wrong with checkout?"), timeout_s=60)

    assert [m.sender for m in result.messages] == ["User", "dev", "lead", "dev"]
    assert result.stop_reason is StopReason.TERMINATE
    first, second = [session_of(m.content) for m in result.messages if m.sender == "dev"]
    assert second == (first[0], first[1] + 1)
    prompts = deployment.prompts().split(f"--- session {first[0]}\n")[1:]
    assert all("a selector picks who speaks next" in p and "asks that one to speak next" not in p
               for p in prompts)
    assert prompts[1].rstrip().endswith("The message you answer:\n[3] lead: lead: ship the fix")
    answers = [(a.agent, a.kind, a.status) for record in client.turns(room) for a in record.bids]
    assert answers.count(("dev", CallKind.SPEAK, AnswerStatus.OK)) == 2


@pytest.mark.parametrize("dev, said", [
    ({"model": f"acp/{PROFILE}", "command": ["sh", "-c", "rm -rf ~"]},
     "a spec never gives an agent's command: external agents run from the workers' ACP "
     "profiles (PARLEY_WORKER_ACP_CONFIG); name one with model: acp/<profile>"),
    ({"model": f"acp/{PROFILE}"}, "cannot take part in a bid room"),
])
def test_a_refused_spec_is_one_line(deployment, tmp_path, dev, said):
    path = tmp_path / "room.json"
    path.write_text(json.dumps({"agents": [{"name": "lead", "model": "scripted", "script": []},
                                           {"name": "dev", **dev}]}))
    created = run_parley(deployment.processes.env, "rooms", "create", str(path))
    assert created.returncode == 2
    assert said in created.stderr and created.stderr.count("\n") == 1, created.stderr


def test_a_roundtable_room_gives_its_acp_panelist_both_rounds_from_one_session(deployment):
    client = deployment.client
    spec = RoomSpec.model_validate({
        "name": "table", "policy": {"kind": "roundtable", "moderator": "Moderator", "rounds": 2,
                                    "call_timeout_s": 60},
        "agents": [{"name": "value", "role": "value for money", "model": "scripted",
                    "queue": deployment.queue, "script": [{"content": "v1"}, {"content": "v2"}]},
                   {"name": "dev", "model": f"acp/{PROFILE}", "role": "build quality"},
                   {"name": "Moderator", "model": "scripted", "queue": deployment.queue,
                    "script": [{"content": "Verdict: buy."}]}]})
    room = client.create_room(spec)

    result = client.wait(room, client.post(room, "Is it worth it?"), timeout_s=90)

    assert [m.sender for m in result.messages] == ["User", "value", "dev", "value", "dev",
                                                   "Moderator"]
    assert result.stop_reason is StopReason.VERDICT
    first, second = [session_of(m.content) for m in result.messages if m.sender == "dev"]
    assert second == (first[0], first[1] + 1)
    prompts = deployment.prompts().split(f"--- session {first[0]}\n")[1:]
    assert "This is a round-table debating the run's question; you are a panelist " \
           "(build quality), round 1 of 2." in prompts[0]
    assert "round 2 of 2" in prompts[1] and "[4] value: v2" in prompts[1]
    assert "asks that one to speak next" not in prompts[0]
    panels = [a for record in client.turns(room) for a in record.bids if a.agent == "dev"]
    assert [(a.kind, a.status) for a in panels] == [(CallKind.PANEL, AnswerStatus.OK)] * 2
def test_a_task_of_the_acp_agent_runs_in_a_session_of_its_own(deployment):
    client = deployment.client
    room = client.create_room(discussion(deployment.queue))
    parents, _ = session_of(ask(client, room, "@dev what is the tax engine?"))

    started = run_parley(deployment.processes.env, "task", "start", room, "dev",
                         "Read the tax engine: why do Canadian checkouts fail?",
                         "--hand-back", "post", "--json")
    assert started.returncode == 0, started.stderr
    task = json.loads(started.stdout)
    wait_until(lambda: client.tasks(room)[0].status == "done", 60, "the task's result")

    result = client.tasks(room)[0].result
    own, number = session_of(result)
    assert own != parents and number == 1 and result.endswith("done.")
    asked = deployment.prompts().split(f"--- session {own}\n", 1)[1]
    assert "why do Canadian checkouts fail?" in asked and "what is the tax engine?" in asked
    child = f"{room}.task-{task['id'][:6]}"
    assert [m.content for m in client.messages(child)][-1] == result
    wait_until(lambda: client.messages(room)[-1].content == result, 30, "the posted result")
    # The parent's session goes on where it was: the task took no prompt of it.
    assert session_of(ask(client, room, "@dev and now?")) == (parents, 2)
