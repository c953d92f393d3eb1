"""Write what swarms' ``GroupChat`` returns for every ``output_type``, as a JSON fixture.

Run it with the python of the swarms venv (see ``setup_venv.sh``)::

    benchmarks/.swarms-venv/bin/python benchmarks/swarms_anchor/output_fixtures.py \
        --out tests/fixtures/swarms_outputs.json

Two kinds of case, both written with their inputs so parley can replay them:

- ``groupchat``: the real ``swarms.GroupChat`` run once per output type with scripted
  stand-in agents (on turn t each agent returns its scripted ``respond(score, message)``);
  the case records the bids, the chat's ``conversation.conversation_history`` and each
  ``run`` result.
- ``conversation``: a ``Conversation`` filled as ``GroupChat._post`` fills it (``metadata:
  {score}`` on scored messages only), then ``history_output_formatter`` for every type;
  for shapes a chat does not produce (a ``System`` first row).

Every result is stored as ``{"type": <Python type name>, "value": <JSON value>}``: JSON has
no tuple, so ``dict-final``'s tuple is a list with ``type: "tuple"``. Nothing here imports
parley, and parley never imports swarms.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import string
import sys
import tempfile
from importlib import metadata
from typing import Any, get_args

TASK = "Should hospitals let AI systems make triage decisions? Discuss the tradeoffs."


def alnum_text(seed: int, words: int) -> str:
    """Deterministic word salad of letters and digits (about 1.5 characters per token)."""
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits
    return " ".join("".join(rng.choice(alphabet) for _ in range(5)) for _ in range(words))


def cjk_text(seed: int, characters: int) -> str:
    """Deterministic CJK characters (more than two tokens per character)."""
    rng = random.Random(seed)
    return "".join(chr(rng.randrange(0x4E00, 0x9FA5)) for _ in range(characters))


def bid(score: float, message: str = "") -> list[Any]:
    """One scripted respond(score, message)."""
    return [score, message]


PANEL = ["Optimist", "Skeptic", "Economist", "Ethicist"]

GROUPCHAT_CASES: list[dict[str, Any]] = [
    {
        # Recency turns a raw-higher bid into a loser, a tie goes to the first agent, a
        # bid exactly at the threshold never wins, an empty reply never wins, then a lull.
        "name": "panel",
        "task": TASK,
        "params": {"max_loops": 12, "threshold": 0.6, "recency_penalty": 0.3, "recency_window": 1},
        "agents": PANEL,
        "turns": [
            {"Optimist": bid(0.9, "Triage AI could cut wait times — a “real” win for the naïve ER."),
             "Skeptic": bid(0.7, "Cut them for whom?"), "Economist": bid(0.3), "Ethicist": bid(0.0)},
            {"Optimist": bid(0.95, "Again: faster!"),
             "Skeptic": bid(0.8, "Point one: bias.\nPoint two: liability.\n\tIndented detail."),
             "Economist": bid(0.6, "Exactly at the bar."), "Ethicist": bid(0.2, "pass")},
            {"Optimist": bid(0.0), "Skeptic": bid(0.99, "I must add more."),
             "Economist": bid(0.5, "Costs."),
             "Ethicist": bid(0.7000000000000001, "Consent: who signs off? # not a comment")},
            {"Optimist": bid(0.8, "- a list marker\n- and another"),
             "Skeptic": bid(0.8, "Tied, but later in the list."), "Economist": bid(0.1),
             "Ethicist": bid(0.9, "I spoke last turn.")},
            {"Optimist": bid(0.75, "Me again."), "Skeptic": bid(0.4, "meh"),
             "Economist": bid(1.0, 'Budget: {"beds": 12, "cost": [1, 2]} \\ back\\slash 😀'),
             "Ethicist": bid(0.3, "")},
            {"Optimist": bid(0.5, "yes"), "Skeptic": bid(0.9, ""), "Economist": bid(0.61, "null"),
             "Ethicist": bid(0.6, "no")},
        ],
    },
    {
        # Economist's "null" above was recency-penalised; here a message that YAML would
        # read as a boolean wins, and the cap (max_loops counts the task) ends the run.
        "name": "max_loops",
        "task": "yes",
        "params": {"max_loops": 3, "threshold": 0.5, "recency_penalty": 0.3, "recency_window": 1},
        "agents": ["Alpha", "Beta"],
        "turns": [
            {"Alpha": bid(0.9, "yes"), "Beta": bid(0.2, "no")},
            {"Alpha": bid(0.9, "again"), "Beta": bid(0.85, "on: off")},
            {"Alpha": bid(0.9, "never posted"), "Beta": bid(0.9, "never posted")},
        ],
    },
    {
        # Nobody replies on the first turn: the chat is the task alone.
        "name": "silent_first_turn",
        "task": "Anyone there?",
        "params": {"max_loops": 20, "threshold": 0.5, "recency_penalty": 0.3, "recency_window": 1},
        "agents": ["Alpha", "Beta"],
        "turns": [{"Alpha": bid(0.0), "Beta": bid(0.9)}],
    },
    {
        # Over the 8,192 tokens of swarms' default context: "str" keeps the newest lines
        # that fit, and the tail of the first one that does not.
        "name": "long_history",
        "task": "Write at length.",
        "params": {"max_loops": 4, "threshold": 0.5, "recency_penalty": 0.3, "recency_window": 2},
        "agents": ["Alpha", "Beta"],
        "turns": [
            {"Alpha": bid(0.9, alnum_text(1, 250)), "Beta": bid(0.2, "short")},
            {"Alpha": bid(0.2, "short"), "Beta": bid(0.9, cjk_text(2, 2000))},
            {"Alpha": bid(0.95, cjk_text(3, 1800)), "Beta": bid(0.5, "short")},
        ],
    },
]

CONVERSATION_CASES: list[dict[str, Any]] = [
    {
        # swarms skips a System row before the first input in the *-all-except-first types.
        "name": "system_first",
        "rows": [["System", "You are a panel.", None], ["User", "Begin.", None],
                 ["Alpha", "First.", 0.75], ["Beta", "Second.", 1.0]],
    },
    {
        "name": "task_only",
        "rows": [["User", "Only the task: 'quoted', \"double\", multi\nline", None]],
    },
]


class ScriptedAgent:
    """Duck-typed ``swarms.Agent`` whose bid on turn t is the case's scripted one.

    With ``auto_equip=False`` GroupChat reads ``agent_name``, saves and restores
    ``output_type`` and calls ``run(task=..., messages=...)``; the reply is what a provider
    returns for a forced tool call, which ``groupchat._extract_args`` parses.
    """

    def __init__(self, name: str, turns: list[dict[str, list[Any]]], respond_tool: dict) -> None:
        """The agent ``name`` of a case whose bids per turn are ``turns``."""
        self.agent_name = name
        self.turns = turns
        self.output_type = "str-all-except-first"
        self.tools_list_dictionary = [respond_tool]
        self.channel = None

    def llm_handling(self) -> Any:
        """GroupChat must never build an LLM client for a stand-in."""
        raise AssertionError("GroupChat tried to build an LLM client for a scripted agent")

    def run(self, task: str, messages: list[dict[str, str]]) -> list[dict[str, Any]]:
        """This turn's scripted bid as a forced ``respond`` tool call."""
        turn = len(messages)  # the whole transcript so far: task + one reply per turn
        score, message = self.turns[turn - 1][self.agent_name]
        arguments = json.dumps({"score": score, "message": message})
        return [{"id": f"call-{turn}", "type": "function",
                 "function": {"name": "respond", "arguments": arguments}}]


def typed(value: Any) -> dict[str, Any]:
    """A result as its Python type's name and a JSON value."""
    return {"type": type(value).__name__, "value": list(value) if isinstance(value, tuple) else value}


def run_groupchat_case(case: dict[str, Any], output_types: list[str]) -> dict[str, Any]:
    """The case with the chat's conversation and ``run``'s result for every output type."""
    from swarms.structs.groupchat import RESPOND_TOOL, GroupChat

    outputs: dict[str, Any] = {}
    history: list[dict[str, Any]] = []
    for output_type in output_types:
        agents = [ScriptedAgent(name, case["turns"], RESPOND_TOOL) for name in case["agents"]]
        chat = GroupChat(name=case["name"], agents=agents, output_type=output_type,
                         auto_equip=False, **case["params"])
        outputs[output_type] = typed(chat.run(case["task"]))
        history = chat.conversation.conversation_history
    return {**case, "kind": "groupchat", "conversation_history": history, "outputs": outputs}


def run_conversation_case(case: dict[str, Any], output_types: list[str]) -> dict[str, Any]:
    """The case's rows as ``GroupChat._post`` stores them, and every formatter result."""
    from swarms.structs.conversation import Conversation
    from swarms.utils.history_output_formatter import history_output_formatter

    conversation = Conversation(time_enabled=False)
    for role, content, score in case["rows"]:
        conversation.add(role=role, content=content,
                         metadata={"score": score} if score is not None else None)
    outputs = {output_type: typed(history_output_formatter(conversation, type=output_type))
               for output_type in output_types}
    return {"name": case["name"], "kind": "conversation",
            "conversation_history": conversation.conversation_history, "outputs": outputs}


def prepare_environment() -> tempfile.TemporaryDirectory | None:
    """Keep swarms' telemetry off and its workspace out of the repository."""
    os.environ.setdefault("SWARMS_TELEMETRY_ON", "false")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    if os.environ.get("WORKSPACE_DIR"):
        return None
    workspace = tempfile.TemporaryDirectory(prefix="swarms-fixtures-")
    os.environ["WORKSPACE_DIR"] = workspace.name
    return workspace


def main() -> int:
    """Write the fixture file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="tests/fixtures/swarms_outputs.json")
    args = parser.parse_args()
    workspace = prepare_environment()
    try:
        from swarms.utils.output_types import HistoryOutputType

        output_types = list(get_args(HistoryOutputType))
        cases = [run_groupchat_case(case, output_types) for case in GROUPCHAT_CASES]
        cases += [run_conversation_case(case, output_types) for case in CONVERSATION_CASES]
        fixture = {"swarms": metadata.version("swarms"), "output_types": output_types,
                   "cases": cases}
        with open(args.out, "w", encoding="utf-8") as file:
            json.dump(fixture, file, ensure_ascii=False, indent=1)
            file.write("\n")
    finally:
        if workspace is not None:
            workspace.cleanup()
    print(f"wrote {len(cases)} cases x {len(output_types)} output types to {args.out}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
