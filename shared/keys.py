"""Every Redis key parley uses. Nothing else builds key names.

Per-room keys carry the room id as a hash tag, ``<prefix>:{<room>}:<name>``, so one
room's keys live in one Redis Cluster slot and its Lua scripts run unchanged there.

========================  ======  ==========================================  ===================
key                       type    holds                                       writers / readers
========================  ======  ==========================================  ===================
``{R}:spec``              hash    ``version`` (when it was stored, µs),         client / all
                                  ``name``, ``policy``, ``json``
``{R}:state``             hash    status, last_seq, run, messages_in_run,       coordinator (Lua) /
                                  recent (JSON list), turn, turn_open,          client, dashboards
                                  turn_deadline, turn_snapshot_seq,
                                  turn_bids_from, turn_opened_at, epoch,
                                  stop_reason, stop_detail, token/cost totals
                                  of every answer, counted as it lands
                                  (``prompt_tokens``, ``completion_tokens``,
                                  ``cost_usd``: 0 from the room's creation;
                                  the current run's ``run_<same>``, reset
                                  when a run starts; per agent
                                  ``agent:<name>:<same>``), and
                                  ``agent:<name>:calls`` (the calls of
                                  committed turns, which numbers a scripted
                                  agent's calls), run_turns,
                                  spec_version, answer (the run's answer so
                                  far), ``policy:<field>`` (the floor
                                  policy's own fields, cleared when a run
                                  starts), ``floor:<field>`` (a policy's
                                  room-scoped fields, kept across runs: a
                                  mention room's speak queue, listening,
                                  asked, waiting, over, read_seq, ops_id,
                                  depth, turns ...; written only by commit
                                  and end_run), inbox_last_id;
                                  failed_takes (takes in a row that ended in
                                  an error; 0 after a commit, a new run or a
                                  post), last_error, failed_inbox_id (the
                                  newest inbox id when the room failed);
                                  paused (``1`` while paused) and paused_at;
                                  run_traceparent and trace (the run's
                                  OpenTelemetry trace, drain and open_turn);
                                  organization (set at create, never
                                  changed; absent: ``default``);
                                  parent and task (a task's room only: the
                                  room and the task it works; set at create,
                                  never changed);
                                  only ``importing`` while an import is
                                  restoring the room (it has no spec yet)
``{R}:log``               stream  the conversation; entry id ``<seq>-0``,       coordinator (Lua) /
                                  fields seq, sender, content, score (absent    workers, client
                                  for people), turn, run, epoch, ts; a
                                  message written from tool calls also has
                                  tools (JSON: each call's record, its result
                                  cut to ``tool_result_max_bytes``, the whole
                                  within about 64 KB) and tool_results
                                  (shared or private: whose prompts read
                                  them); trimmed to about
                                  ``log_stream_maxlen`` when that is set,
                                  else never (the default)
``{R}:inbox``             stream  posted by people/apps, not yet in the log:    client / coordinator
                                  sender, content, ts; emptied by each drain
``{R}:dead``              stream  inbox entries drain could not read: the       coordinator (Lua) /
                                  entry's fields (16 at most, each cut to       operators
                                  ``dead_letter_value_max_bytes``), then
                                  inbox_id and reason; trimmed to about
                                  ``dead_letter_stream_maxlen``
``{R}:bids``              stream  every answer workers returned, of every       workers / coordinator
                                  call kind, late ones too: agent, turn,
                                  kind, phase, call, attempt, score,
                                  message, status, error, error_kind,
                                  tokens, cost, latency, dropped_messages,
                                  answer_id, tool_calls (JSON, when it made
                                  any); trimmed to about
                                  ``bids_stream_maxlen``
``{R}:answer_ids``        zset    the ids of the answers written last (by       workers (Lua)
                                  ms), as many as the answers stream keeps:
                                  an answer written again (a retry after a
                                  lost reply) is neither kept nor counted
                                  twice
``{R}:turns``             stream  one record per decided turn (flat fields;     coordinator (Lua) /
                                  ``bids`` is the JSON list of every phase's    operators, tests
                                  answers, ``late`` of the answers that came
                                  meanwhile and took no part; recent,
                                  policy_state, adjusted and cuts are JSON
                                  too); trimmed to about
                                  ``turns_stream_maxlen``
``{R}:floor_ops``         stream  a mention room's floor changes (listen,      client (Lua) /
                                  talk, instruct, regenerate): op, agent,       coordinator
                                  text, ts; applied by the policy at the next
                                  turn (``floor:ops_id``, the last applied);
                                  trimmed to about 1,000
``{R}:events``            stream  what happened in the room, for followers:     coordinator (Lua),
                                  flat fields ``type``, the event's fields      workers (Lua:
                                  and ``ts`` (see shared/events.py for every    answers), client
                                  type and which script writes it); trimmed     (Lua: pause,
                                  to about ``events_stream_maxlen``; not        resume, cancel) /
                                  archived                                      client, CLI,
                                                                                dashboards
``{R}:tools``             hash    the tool journal: per tool call id (``<turn>.  workers (Lua) /
                                  <phase>.<call>.<round>.<index>``) its start   workers, operators
                                  (JSON: state ``started``, by, at,
                                  timeout_s) until its result replaces it
                                  (state ``done``: the record and the text
                                  the model read), and per model step of a
                                  call (``<turn>.<phase>.<call>.<round>``)
                                  the tool calls it asked for; a call asked
                                  again replays them; about
                                  ``tool_journal_maxlen`` fields, the oldest
                                  dropped (a hash, not a stream: a call
                                  asked again reads its records by id)
``{R}:tool_ids``          zset    the journal's fields by when they were        workers (Lua)
                                  written (ms): which to drop past the cap
``{R}:tool_done:<id>``    list    a wake-up pushed when tool call ``<id>``'s    workers (Lua) /
                                  result is in the journal (a ``queue=``        the calling worker
                                  tool's caller blocks on it); PX 10 min
``{R}:acp_turn:<a>:<t>``  string  the worker taking ACP agent ``<a>``'s call   workers
                                  ``<t>`` (turn.phase.attempt), SET NX; it
                                  expires at the call's deadline: a copy the
                                  broker delivers again (a call may outlast
                                  the visibility timeout) is dropped
``{R}:approvals``         hash    the tool calls that wait or waited for a    workers, client
                                  person, flat fields ``<id>:<field>`` (the   (Lua) /
                                  id: the tool call's,                        coordinator,
                                  turn.phase.call.round.index; the fields:    client, dashboards
                                  agent, tool, arguments (JSON), turn,
                                  phase, requested_at, expires_at, status
                                  (pending, approved, denied, timed_out),
                                  by, reason, answered_at); the newest 1,000
                                  answered ones are kept
``{R}:approvals_open``    zset    the ids of the pending approvals, by        workers, client
                                  requested_at (ms)                           (Lua) / all
``{R}:approvals_done``    zset    the ids of the answered ones, by            workers, client
                                  answered_at (ms): past 1,000 the oldest     (Lua)
                                  go, their fields with them
``{R}:tasks``             hash    the room's background tasks, flat fields    client, workers,
                                  ``<id>:<field>`` (agent, worker,            coordinator (Lua)
                                  hand_back, instruction, by, status
                                  (queued, running, done, failed,
                                  cancelled, timed_out), started_at,
                                  beat_at, deadline, finished_at, result,
                                  error, progress, sent, cancel, revoked,
                                  handed_back, tokens)
``{R}:task_ids``          zset    the tasks' ids by when started (ms)         client, Lua
``{R}:tasks_done``        zset    the finished tasks' ids, by when finished   Lua
                                  (µs): past ``task_finished_max`` the oldest
                                  handed back go, their fields with them
``{R}:handbacks``         zset    finished tasks whose result waits to be     Lua / coordinator
                                  posted as the agent's message, or relayed
                                  in a turn of its own until it commits (ms)
``{R}:children``          set     the rooms of the room's background tasks    workers / client,
                                  (``<R>.task-<short id>``, each a room of      coordinator
                                  its own whose state names ``parent`` and
                                  ``task``): listed with it, deleted and
                                  archived with it
``{R}:lease``             string  ``<coordinator id>:<epoch>``, PX lease ttl    coordinator
``rooms``                 zset    every room by last activity (ms): created,    client, coordinator
                                  posted into, paused, resumed, cancelled,
                                  let go by its coordinator; idle rooms
                                  expire from here (``room_idle_expiry_s``)
``runnable``              zset    rooms needing a coordinator, by due time      client, coordinator
                                  (ms); the lease holder pushes it forward
``coordinators``          zset    live coordinator ids by last heartbeat (ms)   coordinator / ops
``scans_failing:<C>``     string  while coordinator C's scans fail round       coordinator /
                                  after round: how many and the last error;     status
                                  PX 3 lease ttls, deleted when a scan works
``org_limits``            hash    each organization's daily limits: field the   API (on loading
                                  organization, value JSON (max_live_rooms,     its tokens file) /
                                  max_tokens_per_day, max_cost_usd_per_day);    client, coordinator
                                  written whole when the tokens file loads
``{org:<O>}:rooms``       set     organization O's live rooms (ids), the ones   client (create,
                                  its max_live_rooms counts: added before a     delete), coordinator
                                  room's create (claim_org_room.lua), taken     (expiry) / client
                                  out when it is deleted; a background task's
                                  own room is not counted
``{org:<O>}:day:<D>``     hash    organization O's totals on UTC day D          workers / coordinator
                                  (YYYY-MM-DD): prompt_tokens,                  API
                                  completion_tokens, cost_usd of every answer
                                  of its rooms; expires 2 days after the day
``{tools}:workers``       zset    the workers that publish the tools they       workers / client,
                                  offer, by when their entry expires (ms):      CLI, API
                                  the catalog's index, so that readers need
                                  no SCAN; members past their expiry are
                                  trimmed by every publish
``{tools}:worker:<W>``    string  worker W's offer: JSON ``{"worker",           workers / client,
                                  "tools": [{name, description, parameters,     CLI, API
                                  options, source}]}``; PX 3 publish
                                  intervals, refreshed every interval,
                                  deleted at the worker's warm shutdown
========================  ======  ==========================================  ===================

The tool catalog's keys share the hash tag ``{tools}``, so that one MGET reads every
worker's offer on a Redis Cluster too; no room key is named like them.

Memory per room: the log grows with the conversation unless ``log_stream_maxlen`` caps it
(a log entry is about 195 bytes for a 100-character message, 775 for 600 characters, 2,047
for 1,500; a room's spec and state about 6 KB at 4 agents); every other
per-room stream is capped (approximate ``MAXLEN ~``, so Redis may keep up to one stream
node, 100 entries, more). Measured with ``python -m benchmarks.stream_sizes``: a turn record
is about 3.9 KB at 4 agents and 15 KB at 16 agents with 600-character drafts, 29 KB at 16
agents with 1,500-character drafts; a bid 0.8-1.9 KB; an event about 120-150 bytes (a
run_ended carries the run's answer); a dead letter at most 41 KB. At the default caps
(turns 1,000, bids 2,000, events 10,000, dead letters 100) a busy 16-agent room's capped
streams hold at most about 38 MB (under 40 MB), a 4-agent room's about 11 MB. The answer
ids beside the answers stream take about 120 bytes an id once past 128 of them: 240 KB at
the answers' default cap (``MEMORY USAGE`` of 2,000 ids).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Always fullmatch: "$" would also match before a final newline.
_ROOM_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}\Z")


def check_room_id(room: str) -> str:
    """Return ``room`` if it is a valid room id (it becomes a hash tag), else raise."""
    if not _ROOM_ID.fullmatch(room):
        raise ValueError(
            f"invalid room id {room!r}: use 1-128 letters, digits, '_', '.' or '-'"
        )
    return room


@dataclass(frozen=True)
class Keys:
    """Key names under one prefix (tests give each run its own prefix)."""

    prefix: str = "parley"

    def _room(self, room: str, name: str) -> str:
        return f"{self.prefix}:{{{room}}}:{name}"

    def spec(self, room: str) -> str:
        """The room's spec hash."""
        return self._room(room, "spec")

    def state(self, room: str) -> str:
        """The room's state hash."""
        return self._room(room, "state")

    def log(self, room: str) -> str:
        """The room's conversation stream."""
        return self._room(room, "log")

    def floor_ops(self, room: str) -> str:
        """Operators' changes of a mention room's floor, not yet applied by its policy."""
        return self._room(room, "floor_ops")

    def inbox(self, room: str) -> str:
        """Messages posted into the room and not yet committed to its log."""
        return self._room(room, "inbox")

    def bids(self, room: str) -> str:
        """Every bid workers wrote for the room."""
        return self._room(room, "bids")

    def answer_ids(self, room: str) -> str:
        """The ids of the answers written last, so that none is written (or counted) twice."""
        return self._room(room, "answer_ids")

    def turns(self, room: str) -> str:
        """One record per decided turn."""
        return self._room(room, "turns")

    def dead_letters(self, room: str) -> str:
        """Inbox entries that could not become messages, set aside with the reason."""
        return self._room(room, "dead")

    def events(self, room: str) -> str:
        """What happened in the room (runs, messages, turns, answers, leases), for followers."""
        return self._room(room, "events")

    def lease(self, room: str) -> str:
        """Which coordinator serves the room, and under which epoch."""
        return self._room(room, "lease")

    def tools(self, room: str) -> str:
        """The room's tool journal: every tool call's start and result, every model step's
        tool calls."""
        return self._room(room, "tools")

    def tool_ids(self, room: str) -> str:
        """The tool journal's fields by when they were written, to cap it."""
        return self._room(room, "tool_ids")

    def tool_done(self, room: str, call_id: str) -> str:
        """Pushed once tool call ``call_id`` has its result (it expires on its own)."""
        return self._room(room, f"tool_done:{call_id}")
    def acp_turn(self, room: str, agent: str, call: str) -> str:
        """Held by the worker running ACP agent ``agent``'s call ``call``, until its
        deadline."""
        return self._room(room, f"acp_turn:{agent}:{call}")

    def approvals(self, room: str) -> str:
        """The room's approval records: tool calls that wait or waited for a person."""
        return self._room(room, "approvals")

    def approvals_open(self, room: str) -> str:
        """The ids of the room's pending approvals, by when they were asked."""
        return self._room(room, "approvals_open")

    def approvals_done(self, room: str) -> str:
        """The ids of the room's answered approvals, by when they were answered."""
        return self._room(room, "approvals_done")

    def tasks(self, room: str) -> str:
        """The room's background tasks: flat fields ``<id>:<field>``."""
        return self._room(room, "tasks")

    def task_ids(self, room: str) -> str:
        """The ids of the room's tasks, by when each was started."""
        return self._room(room, "task_ids")

    def tasks_done(self, room: str) -> str:
        """The ids of the room's finished tasks, by when each finished."""
        return self._room(room, "tasks_done")

    def handbacks(self, room: str) -> str:
        """The finished tasks whose result waits to be posted as the agent's message, by
        when each finished."""
        return self._room(room, "handbacks")

    def children(self, room: str) -> str:
        """The ids of the rooms of the room's background tasks."""
        return self._room(room, "children")

    def room_keys(self, room: str) -> list[str]:
        """Every key of the room: lease, state and inbox first (delete.lua's order), then
        the rest. Deleting, archiving and expiring a room go by this list."""
        return [self.lease(room), self.state(room), self.inbox(room), self.spec(room),
                self.log(room), self.bids(room), self.turns(room), self.dead_letters(room),
                self.floor_ops(room), self.events(room), self.answer_ids(room),
                self.tools(room), self.tool_ids(room),
                self.approvals(room), self.approvals_open(room), self.approvals_done(room),
                self.tasks(room), self.task_ids(room), self.handbacks(room),
                self.children(room), self.tasks_done(room)]

    @property
    def rooms(self) -> str:
        """All rooms by last activity."""
        return f"{self.prefix}:rooms"

    @property
    def runnable(self) -> str:
        """Rooms that need a coordinator, by due time."""
        return f"{self.prefix}:runnable"

    @property
    def coordinators(self) -> str:
        """Coordinator heartbeats."""
        return f"{self.prefix}:coordinators"

    def scans_failing(self, coordinator: str) -> str:
        """Why a coordinator's scans keep failing, while they do."""
        return f"{self.prefix}:scans_failing:{coordinator}"

    @property
    def org_limits(self) -> str:
        """Every organization's daily limits, as the API last loaded them."""
        return f"{self.prefix}:org_limits"

    def org_rooms(self, organization: str) -> str:
        """The ids of an organization's live rooms, those its max_live_rooms counts."""
        return f"{self.prefix}:{{org:{organization}}}:rooms"

    def org_day(self, organization: str, day: str) -> str:
        """An organization's totals of one UTC day (``YYYY-MM-DD``)."""
        return f"{self.prefix}:{{org:{organization}}}:day:{day}"

    @property
    def tool_workers(self) -> str:
        """The workers that publish their tools, by when their offer expires."""
        return f"{self.prefix}:{{tools}}:workers"

    def tool_worker(self, worker: str) -> str:
        """The tools one worker offers, while it lives."""
        return f"{self.prefix}:{{tools}}:worker:{worker}"
