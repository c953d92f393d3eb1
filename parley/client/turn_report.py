"""What each turn of a room asked and got (``parley turns``): the decided turns from their
records, and the open turn from the answers stream so far, with who is still pending.

The open turn's phases are played again from its answers, as a coordinator taking it over
would: the policy's first calls, then for each phase whose calls all answered (or that a
later phase's answers show was closed), the policy's decision gives the next phase. The
pending calls are the current phase's agents that have not answered.
"""

from __future__ import annotations

from parley.client.results import TurnInFlight, TurnReport
from parley.coordinator import policies
from parley.coordinator.policies import Calls, Decision
from parley.coordinator.turn_loop import TurnAnswers, committed_calls, view_of
from parley.shared.models import Answer, CallKind, RoomSpec
from parley.shared.records import RoomState, decode
from parley.shared.store import RoomStore


def read_turn_report(store: RoomStore, room: str, last: int | None = None) -> TurnReport:
    """The room's turn report; ``last`` keeps only that many of the newest decided turns."""
    state = store.read_state(room)
    records = store.read_turns(room, last)
    open_turn = None
    if state.turn_open:
        _, spec = store.read_spec(room)
        relay = state.raw.get("turn_relay") or ""
        agent = store.redis.hget(store.keys.tasks(room), f"{relay}:agent") if relay else None
        open_turn = open_turn_progress(spec, state, store.read_answers(room, state.turn_bids_from),
                                       decode(agent) if agent else None)
    return TurnReport(room, records, open_turn)


def open_turn_progress(spec: RoomSpec, state: RoomState, entries: list[tuple[str, Answer]],
                       relay_agent: str | None = None) -> TurnInFlight:
    """Where the open turn of ``state`` stands, given the answers stream's entries since the
    turn opened (``turn_bids_from``): late answers of other turns are left out, and each
    call's first answer kept. A relay turn (``relay_agent`` relays its task's result) is
    that agent's one call, not the policy's."""
    view = view_of(state, state.turn)
    inbox = TurnAnswers(state.turn, state.turn_bids_from, committed_calls(state))
    inbox.keep(entries)
    first = (Calls(CallKind.SPEAK, (relay_agent,)) if relay_agent
             else policies.first_calls(spec, view))
    calls: Calls | None = None if isinstance(first, Decision) else first
    phase = 0
    while calls is not None and not relay_agent and phase_closed(inbox, phase, calls):
        inbox.time_out(phase, calls)
        decision = policies.decide(spec, view, inbox.answers)
        if decision.next is None:
            break  # every call answered: the turn is being committed
        phase, calls = phase + 1, decision.next
    agents = calls.agents if calls is not None else []
    pending = inbox.missing(phase, calls) if calls is not None else []
    return TurnInFlight(
        turn=state.turn, run=state.run, phase=phase, kind=calls.kind if calls else None,
        agents=list(agents), answered=[name for name in agents if name not in pending],
        pending=pending, answers=list(inbox.arrived.values()),
        opened_at=state.turn_opened_at, deadline=state.turn_deadline)


def phase_closed(inbox: TurnAnswers, phase: int, calls: Calls) -> bool:
    """True when the phase is over: all its calls answered, or a later phase's answers
    show the coordinator moved on (the missing ones timed out)."""
    later = any(answered_phase > phase for answered_phase, _ in inbox.arrived)
    return later or not inbox.missing(phase, calls)
