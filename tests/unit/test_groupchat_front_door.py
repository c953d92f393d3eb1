"""``parley.GroupChat`` as swarms 16's: conversation, failed runs, agent objects, batches.

The cluster is stood in for by a client that hands back finished runs; the same behaviour
on real processes is in tests/e2e/test_groupchat.py.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from parley import GroupChat, RunFailed
from parley.client import RunResult
from parley.coordinator.policies.bid import recent_window
from parley.shared.models import (
    Answer,
    AnswerStatus,
    ErrorKind,
    Message,
    RoomStatus,
    StopReason,
    TurnRecord,
)
from parley.swarms.groupchat import FIRST_TURN_SILENT, RUN_FAILED, InOrder

AGENTS = [{"name": name, "model": "scripted", "script": []} for name in ("A", "B")]


def result(task: str, replies: list[tuple[str, str, float]], status: RoomStatus = RoomStatus.IDLE,
           stop: StopReason = StopReason.LULL, detail: str = "") -> RunResult:
    """A finished run of ``task`` with ``replies`` as (sender, content, score)."""
    messages = [Message(seq=1, sender="User", content=task)]
    messages += [Message(seq=seq, sender=sender, content=content, score=score)
                 for seq, (sender, content, score) in enumerate(replies, start=2)]
    return RunResult(room=f"room-{task}", status=status, stop_reason=stop, stop_detail=detail,
                     messages=messages)


def first_turn(*bids: tuple[str, float, str]) -> list[TurnRecord]:
    """A run's turn records: only its first turn, with these (agent, score, message) bids."""
    return [TurnRecord(turn=1, run=1, run_turns=1, epoch=1, snapshot_seq=1, messages_in_run=1,
                       recent=[], bids=[Answer(agent=agent, turn=1, score=score, message=message)
                                        for agent, score, message in bids])]


class FinishedRuns:
    """A client whose runs are already over: each task's result, its messages passed to
    ``on_message`` (all but the last ``unseen``, as a wait that ended early would), its
    turn records read back from ``store``."""

    def __init__(self, *results: RunResult, turns: list[TurnRecord] | None = None,
                 unseen: int = 0, before_last: Callable[[str], None] | None = None) -> None:
        self.results = {r.messages[0].content: r for r in results}
        self.turn_records = turns or []
        self.unseen = unseen
        self.before_last = before_last
        self.tasks: dict[str, str] = {}  # room -> the task posted there
        self.store = self

    def create_room(self, spec: Any) -> str:
        return f"new-{len(self.tasks)}-{threading.get_ident()}"

    def post(self, room: str, task: str) -> str:
        self.tasks[room] = task
        return "1-0"

    def wait(self, room: str, inbox_id: str, on_message: Callable[[Message], None] | None = None,
             on_chunk: Callable[[Any], None] | None = None) -> RunResult:
        task = self.tasks[room]
        run = self.results[task]
        shown = run.messages[: len(run.messages) - self.unseen]
        for index, message in enumerate(shown):
            if self.before_last and index == len(shown) - 1:
                self.before_last(task)
            if on_message:
                on_message(message)
        return run

    def read_turn_entries(self, room: str, after: str = "0-0") -> list[tuple[str, TurnRecord]]:
        entries = [(f"{index}-0", record) for index, record in enumerate(self.turn_records, 1)]
        return [(entry_id, record) for entry_id, record in entries
                if int(entry_id.split("-")[0]) > int(after.split("-")[0])]


def chat(client: Any, **options: Any) -> GroupChat:
    return GroupChat(agents=AGENTS, client=client, **options)


def warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The warnings GroupChat logged, as a swarms user's logging sees them."""
    return [record for record in caplog.records
            if record.name == "parley.groupchat" and record.levelno == logging.WARNING]


def test_conversation_history_holds_role_content_and_the_raw_score_on_replies():
    run = result("plan", [("A", "first", 0.9), ("B", "second", 0.7000000000000001)])
    group = chat(FinishedRuns(run))
    assert group.conversation.conversation_history == []

    group.run("plan")

    assert group.conversation.conversation_history == [
        {"role": "User", "content": "plan"},
        {"role": "A", "content": "first", "metadata": {"score": 0.9}},
        {"role": "B", "content": "second", "metadata": {"score": 0.7000000000000001}},
    ]
    # As the seeds' worked example reads it.
    scores = [(msg.get("metadata") or {}).get("score") for msg in group.conversation.conversation_history]
    assert scores == [None, 0.9, 0.7000000000000001]


def test_a_failed_run_warns_as_swarms_and_raises_run_failed_with_reason_and_detail(caplog):
    run = result("plan", [], RoomStatus.FAILED, StopReason.ALL_FAILED, "A: boom; B: boom")
    group = chat(FinishedRuns(run), output_type="dict")

    with pytest.raises(RunFailed) as raised:
        group.run("plan")

    assert raised.value.stop_reason is StopReason.ALL_FAILED
    assert raised.value.stop_detail == "A: boom; B: boom"
    assert raised.value.room == "room-plan"
    assert str(raised.value) == "run in room room-plan failed (all_agents_failed): A: boom; B: boom"
    assert raised.value.output == [{"role": "User", "content": "plan"}]
    [warning] = warnings(caplog)
    assert warning.getMessage() == f"[dynamic-groupchat] {FIRST_TURN_SILENT}"
    assert warning.stop_detail == "A: boom; B: boom"
    assert group.conversation.conversation_history == [{"role": "User", "content": "plan"}]


def test_raise_on_failure_false_returns_what_swarms_returns_and_still_warns(caplog):
    run = result("plan", [], RoomStatus.FAILED, StopReason.ALL_FAILED, "A: boom")
    group = chat(FinishedRuns(run), output_type="dict-final", raise_on_failure=False)

    output = group.run("plan")

    assert output == ("plan", "plan")
    assert len(warnings(caplog)) == 1


def test_a_run_failing_after_replies_warns_that_it_failed(caplog):
    run = result("plan", [("A", "first", 0.9)], RoomStatus.FAILED, StopReason.NO_BIDS, "no worker")
    group = chat(FinishedRuns(run), raise_on_failure=False)

    assert group.run("plan") == "first"

    [warning] = warnings(caplog)
    assert warning.getMessage() == f"[dynamic-groupchat] {RUN_FAILED}"
    assert warning.stop_reason is StopReason.NO_BIDS


def test_a_first_turn_without_any_reply_warns_as_swarms_does(caplog):
    run = result("plan", [])
    group = chat(FinishedRuns(run, turns=first_turn(("A", 0.0, ""), ("B", 0.9, ""))))

    assert group.run("plan") == ""

    assert [w.getMessage() for w in warnings(caplog)] == [f"[dynamic-groupchat] {FIRST_TURN_SILENT}"]


def test_a_lull_of_replies_under_the_threshold_is_no_warning(caplog):
    run = result("plan", [])
    group = chat(FinishedRuns(run, turns=first_turn(("A", 0.2, "maybe"), ("B", 0.0, ""))))

    group.run("plan")

    assert warnings(caplog) == []


def test_every_message_is_streamed_even_one_the_wait_did_not_pass_on():
    run = result("plan", [("A", "first reply", 0.9), ("B", "last", 0.8)])
    group = chat(FinishedRuns(run, unseen=1))
    finals: list[str] = []

    group.run("plan", streaming_callback=lambda sender, chunk, final: final and finals.append(sender))

    assert finals == ["User", "A", "B"]


def test_swarms_agent_objects_carry_every_field_into_the_spec():
    critic = SimpleNamespace(agent_name="Critic", system_prompt="Find flaws.", model_name="openai/gpt-4o",
                             agent_description="stress-tests claims", temperature=0.2, max_tokens=512)
    builder = SimpleNamespace(agent_name="Builder", system_prompt="", model_name="openai/gpt-4o",
                              agent_description=None, temperature=None, max_tokens=None)

    group = GroupChat(agents=[critic, builder], client=FinishedRuns())

    first, second = group.spec.agents
    assert first.model_dump(include={"name", "system_prompt", "model", "description",
                                     "temperature", "max_tokens"}) == {
        "name": "Critic", "system_prompt": "Find flaws.", "model": "openai/gpt-4o",
        "description": "stress-tests claims", "temperature": 0.2, "max_tokens": 512}
    assert (second.description, second.temperature, second.max_tokens) == ("", None, None)


def test_a_swarms_agents_llm_base_url_is_its_api_base():
    local = SimpleNamespace(agent_name="Local", system_prompt="", model_name="openai/llama",
                            llm_base_url="http://127.0.0.1:8000/v1", llm_api_key=None)
    other = SimpleNamespace(agent_name="Builder", system_prompt="", model_name="openai/gpt-4o",
                            llm_base_url=None, api_key_env="TEAM_OPENAI_KEY")

    group = GroupChat(agents=[local, other], client=FinishedRuns())

    assert [(a.api_base, a.api_key_env) for a in group.spec.agents] == [
        ("http://127.0.0.1:8000/v1", None), (None, "TEAM_OPENAI_KEY")]


def test_a_swarms_agent_with_an_api_key_is_refused_in_one_line_naming_api_key_env():
    keyed = SimpleNamespace(agent_name="Keyed", system_prompt="", model_name="openai/gpt-4o",
                            llm_api_key="sk-live-secret")
    other = SimpleNamespace(agent_name="Builder", system_prompt="", model_name="openai/gpt-4o")

    with pytest.raises(ValueError) as refused:
        GroupChat(agents=[keyed, other], client=FinishedRuns())

    message = str(refused.value)
    assert message.startswith("agent 'Keyed': llm_api_key: parley takes no API keys: keys "
                              "stay on the workers.")
    assert "api_key_env" in message and "\n" not in message
    assert "sk-live-secret" not in message


@pytest.mark.parametrize(("name", "rule"), [
    ("Économiste", "agent_name: must be 1-64 letters, digits, spaces, '_', '.' or '-', starting "
                   "with a letter or digit"),
    ("user", "agent_name: 'User' is reserved for the person who posts the task"),
    ("a/b\nc", "agent_name: must be 1-64 letters"),
])
def test_a_name_parley_cannot_store_is_refused_in_one_line_with_the_rule(name: str, rule: str):
    agent = SimpleNamespace(agent_name=name, system_prompt="", model_name="openai/gpt-4o")
    other = SimpleNamespace(agent_name="Builder", system_prompt="", model_name="openai/gpt-4o")

    with pytest.raises(ValueError) as refused:
        GroupChat(agents=[agent, other], client=FinishedRuns())

    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"agent {name!r}: {rule}")


def test_a_spec_agent_with_a_bad_name_is_refused_in_spec_terms():
    with pytest.raises(ValueError, match=r"^agent 'Dr/No': name: must be 1-64 letters[^\n]*$"):
        GroupChat(agents=[{"name": "Dr/No", "model": "scripted", "script": []}, AGENTS[1]],
                  client=FinishedRuns())


def test_room_settings_out_of_range_are_one_line_in_swarms_terms():
    with pytest.raises(ValueError, match=r"^GroupChat 'dynamic-groupchat': max_loops: [^\n]*$"):
        chat(FinishedRuns(), max_loops=0)
    with pytest.raises(ValueError, match=r"^GroupChat 'x': agents: [^\n]*repeat"):
        GroupChat(name="x", agents=[AGENTS[0], {**AGENTS[1], "name": "a"}], client=FinishedRuns())


def test_held_callbacks_come_out_in_run_order_once_earlier_runs_finish():
    order = InOrder(3)
    emitted: list[str] = []
    order.deliver(2, lambda: emitted.append("c1"))
    order.deliver(1, lambda: emitted.append("b1"))
    order.deliver(0, lambda: emitted.append("a1"))
    order.finish(2)
    order.deliver(0, lambda: emitted.append("a2"))
    assert emitted == ["a1", "a2"]

    order.finish(0)
    order.deliver(1, lambda: emitted.append("b2"))
    order.finish(1)

    assert emitted == ["a1", "a2", "b1", "b2", "c1"]


def test_run_batch_keeps_task_order_and_never_interleaves_callbacks():
    runs = [result(task, [("A", f"{task} reply", 0.9), ("B", f"{task} last", 0.8)])
            for task in ("one", "two", "three")]
    later_done = threading.Event()

    def hold_the_first_task(task: str) -> None:
        # "one" sends its last message only after "three" has finished.
        if task == "one":
            assert later_done.wait(10)

    client = FinishedRuns(*runs, before_last=hold_the_first_task)
    original_wait = client.wait

    def wait_then_mark(room: str, inbox_id: str, **kwargs: Any) -> RunResult:
        outcome = original_wait(room, inbox_id, **kwargs)
        if client.tasks[room] == "three":
            later_done.set()
        return outcome

    client.wait = wait_then_mark  # type: ignore[method-assign]
    group = chat(client, output_type="final")
    messages: list[str] = []
    words: list[str] = []

    def on_chunk(sender: str, chunk: str, final: bool) -> None:
        words.append(chunk)
        if final:
            messages.append("".join(words))
            words.clear()

    outputs = group.run_batch(["one", "two", "three"], streaming_callback=on_chunk)

    assert outputs == ["one last", "two last", "three last"]
    assert group.rooms == ["room-one", "room-two", "room-three"]
    assert messages == [m for task in ("one", "two", "three")
                        for m in (task, f"{task} reply", f"{task} last")]
    assert group.conversation.conversation_history[0] == {"role": "User", "content": "three"}


def test_run_batch_raises_the_first_failed_run_in_task_order():
    runs = [result("one", [("A", "fine", 0.9)]),
            result("two", [], RoomStatus.FAILED, StopReason.ALL_FAILED, "A: boom"),
            result("three", [], RoomStatus.FAILED, StopReason.ALL_FAILED, "B: boom")]
    group = chat(FinishedRuns(*runs))

    with pytest.raises(RunFailed) as raised:
        group.run_batch(["one", "two", "three"])

    assert raised.value.room == "room-two"
    assert group.conversation.conversation_history == [{"role": "User", "content": "two"}]
    # Every task's room ran side by side and is kept, the ones after the failure too.
    assert group.rooms == ["room-one", "room-two", "room-three"]


def test_a_recency_window_below_one_is_kept_and_penalises_the_last_speaker_as_swarms():
    group = chat(FinishedRuns(), recency_window=-1)

    assert group.spec.policy.recency_window == -1  # type: ignore[union-attr]
    assert recent_window(group.spec.policy) == 1  # type: ignore[arg-type]


def failed_turns() -> list[TurnRecord]:
    """Two turns in which A failed (no key, then prose instead of the respond call)."""
    no_key = Answer(agent="A", turn=1, status=AnswerStatus.ERROR, error_kind=ErrorKind.MISSING_KEY,
                    error="AuthenticationError: OPENAI_API_KEY is not set",
                    error_variable="OPENAI_API_KEY")
    prose = Answer(agent="A", turn=2, status=AnswerStatus.UNPARSED, error_kind=ErrorKind.NO_TOOL_CALL,
                error="no respond tool call")
    return [TurnRecord(turn=turn, run=1, run_turns=turn, epoch=1, snapshot_seq=turn,
                       messages_in_run=turn, recent=[],
                       bids=[failed, Answer(agent="B", turn=turn, score=0.9, message=f"b{turn}")])
            for turn, failed in ((1, no_key), (2, prose))]


def test_each_failed_or_unparsed_bid_is_warned_as_swarms_warns_a_failed_bid(caplog):
    run = result("plan", [("B", "b1", 0.9), ("B", "b2", 0.9)])
    run.messages[1].turn, run.messages[2].turn = 1, 2
    group = chat(FinishedRuns(run, turns=failed_turns()))

    group.run("plan")

    assert [w.getMessage() for w in warnings(caplog)] == [
        "[dynamic-groupchat] A failed to bid on turn 1: AuthenticationError: OPENAI_API_KEY is "
        "not set (likely fix: set OPENAI_API_KEY on the workers, or name the key's variable in "
        "the agent's api_key_env)",
        "[dynamic-groupchat] A's bid on turn 2 could not be parsed: no respond tool call "
        "(likely fix: use a model that supports function calling (tool calls))"]
    assert [(w.agent, w.turn, w.status) for w in warnings(caplog)] == [
        ("A", 1, "error"), ("A", 2, "unparsed")]


def test_verbose_prints_text_as_text_and_each_failure_before_its_turns_message(capsys):
    run = result("plan", [("B", "[/] closes nothing; [bold]x[/bold] and [red] stay", 0.9),
                          ("B", "b2", 0.9)])
    run.messages[1].turn, run.messages[2].turn = 1, 2
    group = chat(FinishedRuns(run, turns=failed_turns()), verbose=True)

    group.run("plan")

    printed = " ".join(capsys.readouterr().out.split())
    assert "[/] closes nothing; [bold]x[/bold] and [red] stay" in printed
    first_failure = printed.index("A failed to bid on turn 1")
    assert printed.index("[/] closes nothing") > first_failure
    assert printed.index("b2") > printed.index("A's bid on turn 2 could not be parsed")


def test_a_warning_no_handler_would_show_is_printed_to_stderr_as_swarms_leaves_logging(
        capsys, monkeypatch):
    # What importing swarms does: the root logger and its handlers at ERROR.
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [logging.StreamHandler()])
    root.handlers[0].setLevel(logging.ERROR)
    monkeypatch.setattr(root, "level", logging.ERROR)
    run = result("plan", [("B", "b1", 0.9), ("B", "b2", 0.9)])
    run.messages[1].turn, run.messages[2].turn = 1, 2
    group = chat(FinishedRuns(run, turns=failed_turns()))

    group.run("plan")

    said = capsys.readouterr().err.splitlines()
    assert said[0].startswith("[dynamic-groupchat] A failed to bid on turn 1: ")
    assert said[1].startswith("[dynamic-groupchat] A's bid on turn 2 could not be parsed: ")
