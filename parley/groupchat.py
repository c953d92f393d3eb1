"""swarms' ``GroupChat`` interface over parley: the same constructor, ``run`` and
``run_batch``, with each run in its own distributed room.

Code written against ``swarms.GroupChat`` moves over by swapping the import and passing
agents as parley agent specs (or any object with ``agent_name``, ``system_prompt`` and
``model_name``). ``idle_timeout`` and ``auto_equip`` are accepted for compatibility:
parley never ends a run on a wall clock, and always forces the ``respond`` tool.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rich.console import Console
from rich.panel import Panel

from parley.client import Client
from parley.output import HISTORY_OUTPUT_TYPES, format_history
from shared.models import AgentSpec, BidPolicy, Message, RoomSpec

StreamingCallback = Callable[[str, str, bool], None]

OUTPUT_TYPES = HISTORY_OUTPUT_TYPES


def as_agent_spec(agent: Any) -> AgentSpec:
    """An AgentSpec from a spec, a dict, or a swarms-style agent object."""
    if isinstance(agent, AgentSpec):
        return agent
    if isinstance(agent, dict):
        return AgentSpec.model_validate(agent)
    return AgentSpec(name=agent.agent_name, system_prompt=getattr(agent, "system_prompt", "") or "",
                     model=agent.model_name)


def stream_message(message: Message, callback: StreamingCallback) -> None:
    """Replay a posted message word by word, then an empty chunk with ``is_final=True``."""
    words = message.content.split(" ")
    for index, word in enumerate(words):
        chunk = word if index == len(words) - 1 else f"{word} "
        if chunk:
            callback(message.sender, chunk, False)
    callback(message.sender, "", True)


class GroupChat:
    """A turn-based, self-selecting group chat: each turn every agent bids, and the single
    highest recency-adjusted bid strictly above ``threshold`` is posted."""

    def __init__(
        self,
        name: str = "dynamic-groupchat",
        description: str = "Agents take turns; one speaker per turn.",
        agents: Iterable[Any] | None = None,
        max_loops: int = 20,
        threshold: float = 0.5,
        recency_penalty: float = 0.3,
        recency_window: int = 1,
        idle_timeout: float = 8.0,
        output_type: str = "str-all-except-first",
        verbose: bool = False,
        auto_equip: bool = True,
        bid_timeout_s: float = 30.0,
        client: Client | None = None,
    ) -> None:
        agent_specs = [as_agent_spec(agent) for agent in agents or []]
        if len(agent_specs) < 2:
            raise ValueError("GroupChat requires at least 2 agents.")
        if output_type not in OUTPUT_TYPES:
            raise ValueError(f"output_type must be one of {', '.join(OUTPUT_TYPES)}")
        self.name = name
        self.description = description
        self.output_type = output_type
        self.verbose = verbose
        self.idle_timeout = idle_timeout  # accepted, unused: runs end on a lull
        self.auto_equip = auto_equip  # accepted: the respond tool is always forced
        self.spec = RoomSpec(
            name=name, description=description, agents=agent_specs,
            policy=BidPolicy(threshold=threshold, recency_penalty=recency_penalty,
                             recency_window=recency_window, max_messages=max_loops,
                             bid_timeout_s=bid_timeout_s),
        )
        self.client = client or Client()
        self.rooms: list[str] = []

    def run(self, task: str, streaming_callback: StreamingCallback | None = None) -> Any:
        """Run ``task`` in a fresh room until a lull or ``max_loops`` messages; return the
        conversation formatted per ``output_type``."""
        result = self.client.run(self.spec, task, on_message=self._on_message(streaming_callback))
        self.rooms.append(result.room)
        return format_history(result.messages, self.output_type)

    def run_batch(self, tasks: list[str]) -> list[Any]:
        """Run each task in its own room, side by side; outputs in task order."""
        with ThreadPoolExecutor(max_workers=min(16, max(1, len(tasks)))) as pool:
            return list(pool.map(self.run, tasks))

    def _on_message(self, callback: StreamingCallback | None) -> Callable[[Message], None]:
        console = Console()

        def on_message(message: Message) -> None:
            if callback is not None:
                stream_message(message, callback)
            if self.verbose:
                score = "" if message.score is None else f"  (score={message.score:.2f})"
                style = "green" if message.score is None else "blue"
                console.print(Panel(message.content, title=f"{message.sender}{score}",
                                    border_style=style))

        return on_message
