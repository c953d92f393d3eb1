"""The console's input: a line is a post as you, or a command. Each command is one call of
the Client; what it answers (or why it cannot) is one line for the transcript."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from parley.client.client import Client
from parley.views.terminal_text import terminal_text

HELP = """commands:
/listen @a           the agent only listens
/talk @a             a listening agent talks again
/instruct @a TEXT    the agent's next turn is on TEXT
/regenerate          ask again the agents that answered the last person
/approve ID          approve a tool call waiting for you
/deny ID [reason]    deny it (the model is told why)
/task @a TEXT        start a background task for the agent
/tasks               the room's background tasks
/cancel TASK         stop a task (six hex digits of its id are enough)
/pause, /resume      stop opening turns, and go on
/help, /quit         this list, and leave
anything else is posted as you"""
QUIT = "quit"  # what /quit answers: the app closes


@dataclass(frozen=True)
class Console:
    """Who posts, where, and through which Client."""

    client: Client
    room: str
    me: str


def agent_and_text(args: str, usage: str, text_needed: bool = False) -> tuple[str, str]:
    """``@agent rest``: the agent's name and the rest; ValueError with the usage else."""
    name, _, rest = args.strip().partition(" ")
    if not name.startswith("@") or len(name) < 2 or (text_needed and not rest.strip()):
        raise ValueError(f"usage: {usage}")
    return name[1:], rest.strip()


def listen(c: Console, args: str) -> str:
    """``/listen @a``: the agent only listens."""
    agent, _ = agent_and_text(args, "/listen @agent")
    c.client.listen(c.room, agent)
    return f"{agent} only listens from its next turn on"


def talk(c: Console, args: str) -> str:
    """``/talk @a``: a listening agent talks again."""
    agent, _ = agent_and_text(args, "/talk @agent")
    c.client.talk(c.room, agent)
    return f"{agent} talks again"


def instruct(c: Console, args: str) -> str:
    """``/instruct @a TEXT``: the agent is next, on TEXT."""
    agent, text = agent_and_text(args, "/instruct @agent TEXT", text_needed=True)
    c.client.instruct(c.room, agent, text)
    return f"{agent} is next, on: {text}"


def regenerate(c: Console, args: str) -> str:
    """``/regenerate``: the agents that answered the last person, again."""
    c.client.regenerate(c.room)
    return "the agents that answered the last person are asked again"


def approve(c: Console, args: str) -> str:
    """``/approve ID``: approve a tool call waiting for a person, as you."""
    if not args.strip() or " " in args.strip():
        raise ValueError("usage: /approve ID")
    answered = c.client.approve(c.room, args.strip(), True, c.me)
    return f"approved {answered.tool} ({answered.id})"


def deny(c: Console, args: str) -> str:
    """``/deny ID [reason]``: deny it, the model told why."""
    approval, _, reason = args.strip().partition(" ")
    if not approval:
        raise ValueError("usage: /deny ID [reason]")
    answered = c.client.approve(c.room, approval, False, c.me, reason.strip())
    return f"denied {answered.tool} ({answered.id})"


def task(c: Console, args: str) -> str:
    """``/task @a TEXT``: start a background task for the agent."""
    agent, text = agent_and_text(args, "/task @agent TEXT", text_needed=True)
    started = c.client.start_task(c.room, agent, text)
    return f"task {task_id(started)} started for {agent}"


def list_tasks(c: Console, args: str) -> str:
    """``/tasks``: the room's background tasks, a line each."""
    found = c.client.tasks(c.room)
    if not found:
        return "no background task in this room"
    return "\n".join(f"{task_id(t)[:6]}  {field_of(t, 'agent')}  {field_of(t, 'status')}  "
                     f"{field_of(t, 'instruction') or field_of(t, 'text')}" for t in found)


def cancel(c: Console, args: str) -> str:
    """``/cancel TASK``: stop a task (a unique start of its id is enough)."""
    if not args.strip():
        raise ValueError("usage: /cancel TASK")
    c.client.cancel_task(args.strip(), room=c.room)
    return f"task {args.strip()} cancelled"


def field_of(value: Any, name: str) -> str:
    """A task's field, whether it is a mapping or an object."""
    found = value.get(name) if isinstance(value, dict) else getattr(value, name, "")
    return terminal_text(str(found or ""))


def task_id(value: Any) -> str:
    """A task's id (a started task may be given as its id alone)."""
    return value if isinstance(value, str) else field_of(value, "id")


def pause(c: Console, args: str) -> str:
    """``/pause``: no turn opens, posts wait."""
    return "paused" if c.client.pause(c.room) else "the room was paused already"


def resume(c: Console, args: str) -> str:
    """``/resume``: the room goes on."""
    return "resumed" if c.client.resume(c.room) else "the room was not paused"


COMMANDS: dict[str, Callable[[Console, str], str]] = {
    "listen": listen, "talk": talk, "instruct": instruct, "regenerate": regenerate,
    "approve": approve, "deny": deny, "task": task, "tasks": list_tasks, "cancel": cancel,
    "pause": pause, "resume": resume,
    "help": lambda c, args: HELP, "quit": lambda c, args: QUIT,
}


def run_line(c: Console, line: str) -> str:
    """Post the line as you, or run its command; what it did, in words. A command's
    refusal (a wrong agent, a room of another policy) is ValueError, in words too."""
    text = line.strip()
    if not text.startswith("/"):
        c.client.post(c.room, text, sender=c.me)
        return ""
    name, _, args = text[1:].partition(" ")
    command = COMMANDS.get(name)
    if command is None:
        raise ValueError(f"unknown command /{terminal_text(name)}: /help lists them")
    return command(c, args)
