"""This worker's ACP sessions: one per (room, agent), each an agent process of its profile
spoken to over stdio with the ``agent-client-protocol`` package.

Sessions live on one event loop of their own (a daemon thread); the worker's call threads
reach them through blocking calls that wait at most the turn's deadline. A session starts
on the agent's first turn here and closes once it took no turn for ``acp_idle_s`` or its
room is gone; one whose process died is dropped, and the next turn starts a new one (the
turn then sends the room's recent history first: workers.acp.turns).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import structlog
from acp import PROTOCOL_VERSION, text_block
from acp.schema import (
    AgentMessageChunk,
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    Implementation,
    PermissionOption,
    RequestPermissionResponse,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
)
from acp.stdio import spawn_agent_process

from parley.workers.acp.config import AcpConfig, AcpProfile

log = structlog.get_logger("parley.acp")

T = TypeVar("T")
# How long starting a process and its session may take, at most.
START_TIMEOUT_S = 30.0
# How often idle sessions and deleted rooms are looked for.
REAP_INTERVAL_S = 2.0
# How long a prompt cancelled at its deadline may take to end before its process is ended.
CANCEL_WAIT_S = 5.0
# An agent's stdout line may be this long (a big diff in one message).
LINE_LIMIT_BYTES = 16 * 1024 * 1024
ALLOW_KINDS = ("allow_once", "allow_always")
REJECT_KINDS = ("reject_once", "reject_always")

SessionKey = tuple[str, str, str]  # key prefix, room, agent


class AcpSessionError(RuntimeError):
    """A session could not be started or answered (its process died, or the worker holds
    as many sessions of the profile as it may)."""


class AcpProcessEnded(AcpSessionError):
    """The session's process ended while a turn waited for its answer."""


@dataclass
class TurnHandlers:
    """What the turn under way does with the agent's reports: its text as it comes, its
    tool calls as it reports them, and a permission it asks (True: allowed)."""

    on_text: Callable[[str], None]
    on_tool: Callable[[ToolCallStart | ToolCallProgress], None]
    permit: Callable[[ToolCallUpdate], bool]


def chosen_outcome(options: list[PermissionOption], allowed: bool) -> RequestPermissionResponse:
    """The answer to a permission request: the agent's first option of the verdict's kind;
    a denial with no reject option is the request cancelled, which also refuses it."""
    kinds = ALLOW_KINDS if allowed else REJECT_KINDS
    option = next((option for option in options if option.kind in kinds), None)
    if option is None:
        return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
    return RequestPermissionResponse(
        outcome=AllowedOutcome(outcome="selected", option_id=option.option_id))


class RoomClient:
    """parley's side of one session: it passes the agent's updates to the turn under way.
    It offers no file system and no terminal: the agent's tools are its own."""

    def __init__(self) -> None:
        self.handlers: TurnHandlers | None = None

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        """Text to the turn's stream, tool calls to its record; the rest is not shown."""
        handlers = self.handlers
        if handlers is None:
            return
        if isinstance(update, AgentMessageChunk) and getattr(update.content, "text", None):
            handlers.on_text(update.content.text)
        elif isinstance(update, ToolCallStart | ToolCallProgress):
            handlers.on_tool(update)

    async def request_permission(self, options: list[PermissionOption], session_id: str,
                                 tool_call: ToolCallUpdate, **_: Any) -> RequestPermissionResponse:
        """The room's approvers decide (a blocking wait, on a thread of its own); with no
        turn under way, it is refused."""
        handlers = self.handlers
        allowed = handlers is not None and await asyncio.to_thread(handlers.permit, tool_call)
        return chosen_outcome(options, allowed)

    def on_connect(self, conn: Any) -> None:
        """Nothing to keep: the session holds the connection."""


@dataclass
class AcpSession:
    """One agent process and its session, as this worker holds it for a room's agent."""

    key: SessionKey
    profile: str
    client: RoomClient
    stack: contextlib.AsyncExitStack
    conn: Any
    process: Any
    session_id: str
    read_seq: int = 0  # the room's messages up to this seq are in its session
    used_at: float = field(default_factory=time.monotonic)
    busy: bool = False
    # Its last turn failed and the worker has not written that answer yet: the turn asked
    # again waits for it, so that followers read the failure before the new text.
    unanswered: bool = False

    @property
    def alive(self) -> bool:
        """True while its process runs."""
        return self.process.returncode is None


class AcpSessions:
    """The worker's sessions, on their own event loop; ``room_gone(key)`` tells a session
    whose room was deleted."""

    def __init__(self, config: AcpConfig, idle_s: float,
                 room_gone: Callable[[SessionKey], bool] = lambda key: False) -> None:
        self.config = config
        self.idle_s = idle_s
        self.room_gone = room_gone
        self.sessions: dict[SessionKey, AcpSession] = {}
        # A Condition: a call for a session still in a turn (one cut a moment ago) waits
        # for it to be given back.
        self.lock = threading.Condition()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="acp-sessions",
                                       daemon=True)
        self.thread.start()
        self.reaper = self.run(self._reap_forever(), None, wait=False)

    def run(self, coroutine: Awaitable[T], timeout_s: float | None, wait: bool = True) -> Any:
        """Run ``coroutine`` on the sessions' loop; wait at most ``timeout_s`` for it."""
        future: Any = asyncio.run_coroutine_threadsafe(coroutine, self.loop)  # type: ignore[arg-type]
        return future.result(timeout_s) if wait else future

    def profile(self, name: str) -> AcpProfile:
        """The profile called ``name``; AcpSessionError when this worker has none."""
        profile = self.config.agents.get(name)
        if profile is None:
            raise AcpSessionError(f"this worker runs no ACP profile {name!r}")
        return profile

    def take(self, key: SessionKey, profile: str, deadline: float) -> AcpSession:
        """The key's live session, marked busy, started if there is none (or it died)."""
        with self.lock:
            session = self.sessions.get(key)
            while session is not None and (session.busy or session.unanswered):
                if not self.lock.wait(max(0.0, deadline - time.time())):
                    raise AcpSessionError(f"{key[2]}'s session in room {key[1]} is in a turn")
                session = self.sessions.get(key)
            if session is not None and session.alive:
                session.busy = True
                return session
        if session is not None:
            log.warning("acp_session_died", room=key[1], agent=key[2], profile=profile)
            self.close(key)
        self.make_room_for(profile)
        timeout = max(0.1, min(START_TIMEOUT_S, deadline - time.time()))
        session = self.run(self._start(key, profile), timeout)
        with self.lock:
            self.sessions[key] = session
        return session

    def give_back(self, session: AcpSession, failed: bool = False) -> None:
        """The turn is over: the session waits for the next (a failed turn's, for its
        answer to be written first: ``answered``)."""
        with self.lock:
            session.used_at = time.monotonic()
            session.busy = False
            session.unanswered = failed
            self.lock.notify_all()

    def answered(self, key: SessionKey) -> None:
        """The worker wrote the answer of the key's last turn."""
        with self.lock:
            session = self.sessions.get(key)
            if session is not None and session.unanswered:
                session.unanswered = False
                self.lock.notify_all()

    def make_room_for(self, profile: str) -> None:
        """Close the least recently used idle session of the profile when it holds its
        ``max_sessions``; AcpSessionError when every one of them is in a turn."""
        most = self.profile(profile).max_sessions
        with self.lock:
            held = [s for s in self.sessions.values() if s.profile == profile]
            idle = sorted((s for s in held if not s.busy), key=lambda s: s.used_at)
        if len(held) < most:
            return
        if not idle:
            raise AcpSessionError(f"ACP profile {profile!r} holds its max_sessions ({most}) "
                                  "sessions, all in turns")
        self.close(idle[0].key)

    async def _start(self, key: SessionKey, name: str) -> AcpSession:
        profile = self.profile(name)
        client = RoomClient()
        stack = contextlib.AsyncExitStack()
        try:
            conn, process = await stack.enter_async_context(spawn_agent_process(
                cast(Any, client), *profile.command, env=profile.environment(), cwd=profile.cwd,
                transport_kwargs={"limit": LINE_LIMIT_BYTES}))
            await conn.initialize(protocol_version=PROTOCOL_VERSION,
                                  client_capabilities=ClientCapabilities(),
                                  client_info=Implementation(name="parley", version="1"))
            started = await conn.new_session(cwd=profile.cwd, mcp_servers=[])
        except Exception as error:
            await stack.aclose()
            raise AcpSessionError(f"ACP profile {name!r} did not start a session: "
                                  f"{type(error).__name__}: {error}"[:300]) from error
        log.info("acp_session_started", room=key[1], agent=key[2], profile=name,
                 session=started.session_id)
        return AcpSession(key, name, client, stack, conn, process, started.session_id,
                          busy=True)

    def prompt(self, session: AcpSession, text: str, handlers: TurnHandlers,
               deadline: Callable[[], float]) -> str:
        """Send one prompt and wait for the agent to end its turn, at most until
        ``deadline()`` (which may move on while a permission waits for a person); the
        stop reason it gave. Past the deadline the prompt is cancelled: TimeoutError."""
        session.client.handlers = handlers
        future = self.run(session.conn.prompt(session_id=session.session_id,
                                              prompt=[text_block(text)]), None, wait=False)
        try:
            while (left := deadline() - time.time()) > 0:
                with contextlib.suppress(TimeoutError):
                    return str(future.result(min(left, 0.5)).stop_reason)
        except Exception as error:
            # The connection closes as the process ends, before its exit is reaped.
            if isinstance(error, ConnectionError) or not session.alive:
                self.close(session.key)
                raise AcpProcessEnded(f"the ACP agent's process ended "
                                      f"(exit {session.process.returncode})") from error
            raise
        finally:
            session.client.handlers = None
        self.end_cancelled(session, future)
        raise TimeoutError("the ACP agent did not end its turn by the deadline")

    def end_cancelled(self, session: AcpSession, future: Any) -> None:
        """Cancel a prompt past its deadline and wait for the agent to end it, what it
        writes meanwhile dropped: given back earlier, the session would hand the next
        attempt's turn this prompt's last words. One that does not end within
        ``CANCEL_WAIT_S`` is closed with its process (the next turn starts a new one)."""
        self.cancel(session)
        try:
            future.result(CANCEL_WAIT_S)
        except Exception:  # noqa: BLE001 - ended, however: the session is free again
            if not future.done():
                log.warning("acp_prompt_not_ended", room=session.key[1], agent=session.key[2])
                self.close(session.key)

    def cancel(self, session: AcpSession) -> None:
        """Ask the agent to stop its prompt (ACP ``session/cancel``)."""
        with contextlib.suppress(Exception):
            self.run(session.conn.cancel(session_id=session.session_id), 5.0)
        log.info("acp_prompt_cancelled", room=session.key[1], agent=session.key[2])

    def close(self, key: SessionKey) -> None:
        """End the key's session and its process."""
        with self.lock:
            session = self.sessions.pop(key, None)
            self.lock.notify_all()
        if session is not None:
            with contextlib.suppress(Exception):
                self.run(session.stack.aclose(), 10.0)
            log.info("acp_session_closed", room=key[1], agent=key[2], profile=session.profile)

    def close_all(self) -> None:
        """End every session (the worker stops)."""
        self.reaper.cancel()
        for key in list(self.sessions):
            self.close(key)
        # The loop itself runs on (a daemon thread): stopped, the transports of processes
        # that already ended would be collected on a closed loop.
        with contextlib.suppress(Exception):
            self.run(_end_tasks(), 5.0)

    def stale(self) -> list[SessionKey]:
        """Sessions idle past ``idle_s``, dead, or of a room that is gone."""
        now = time.monotonic()
        with self.lock:
            idle = [s for s in self.sessions.values() if not s.busy]
        return [s.key for s in idle
                if now - s.used_at > self.idle_s or not s.alive or self.room_gone(s.key)]

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(REAP_INTERVAL_S)
            try:
                for key in await asyncio.to_thread(self.stale):
                    await asyncio.to_thread(self.close, key)
            except Exception as error:  # noqa: BLE001 - the next round tries again
                log.warning("acp_reap_failed", error=f"{type(error).__name__}: {error}"[:300])


async def _end_tasks() -> None:
    """Cancel what is left on the loop (a reap under way, a close cut short) and wait for it."""
    rest = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in rest:
        task.cancel()
    await asyncio.gather(*rest, return_exceptions=True)
