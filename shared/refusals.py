"""The codes parley's Lua scripts refuse with, and the one place a refusal is read.

A script that refuses writes nothing and replies with an error ``CODE detail`` (each
script's header says which codes it uses):

===============  ===================================================================
code             the script refused because
===============  ===================================================================
``LEASELOST``    the token no longer holds the room's lease
``NOTURN``       the turn named is not the open one
``STALESEQ``     the log moved since the coordinator read it
``TURNOPEN``     a turn is open
``PAUSED``       the room is paused: no turn opens
``NOROOM``       there is no such room (never created, deleted, expired, or importing)
``EXISTS``       the room, or one of its keys, exists
``NOTRESERVED``  the room id was not reserved for an import
``HELD``         a coordinator holds the room (the detail: its lease's value)
``BUSY``         a run, a turn or posts are in progress
``CHANGED``      the room moved on since the caller read it (the detail: what moved)
``BADARG``       an argument is not as the script's header says
``BADPAYLOAD``   the commit's payload is not as its header says
``BADSTATE``     a stored counter or total the script would change is not a number
``OVERFLOW``     a count the script would move would reach its limit, 10^14
``NOAPPROVAL``   the room has no approval of that id
``NOTAPPROVER``  the person answering an approval is not on the spec's ``approvers``
                 (the detail: the roster)
``LIMIT``        the organization has its max_live_rooms (the detail: how many it has)
``TASKROOM``     the room is a background task's own: it takes no posts and starts no
                 task (the detail: its parent room)
===============  ===================================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from redis.exceptions import ResponseError


class Refusal(StrEnum):
    """A script's refusal code, as it opens the error reply."""

    LEASE_LOST = "LEASELOST"
    NO_TURN = "NOTURN"
    STALE_SEQ = "STALESEQ"
    TURN_OPEN = "TURNOPEN"
    PAUSED = "PAUSED"
    NO_ROOM = "NOROOM"
    EXISTS = "EXISTS"
    NOT_RESERVED = "NOTRESERVED"
    HELD = "HELD"
    BUSY = "BUSY"
    CHANGED = "CHANGED"
    BAD_ARG = "BADARG"
    BAD_PAYLOAD = "BADPAYLOAD"
    BAD_STATE = "BADSTATE"
    OVERFLOW = "OVERFLOW"
    NO_APPROVAL = "NOAPPROVAL"
    NOT_APPROVER = "NOTAPPROVER"
    LIMIT = "LIMIT"
    TASK_ROOM = "TASKROOM"


# Refusals of a fenced write that mean its coordinator no longer serves the room.
FENCED = frozenset({Refusal.LEASE_LOST, Refusal.NO_TURN, Refusal.STALE_SEQ, Refusal.TURN_OPEN})
# delete.lua's refusals that mean the room is not idle (any more).
NOT_IDLE = frozenset({Refusal.HELD, Refusal.BUSY, Refusal.CHANGED})


@dataclass(frozen=True)
class Refused:
    """A script's refusal: its code, and the detail the script gave after it."""

    code: Refusal
    detail: str = ""


def refusal_of(error: ResponseError) -> Refused | None:
    """The refusal a script's error reply carries; None for an error no script of ours
    wrote (a script that failed to run, an out-of-memory Redis)."""
    code, _, detail = str(error).partition(" ")
    try:
        return Refused(Refusal(code), detail)
    except ValueError:
        return None


def refused_with(error: ResponseError, codes: frozenset[Refusal] | Refusal) -> bool:
    """True when ``error`` is a script's refusal with ``codes`` (one code, or any of a set)."""
    refused = refusal_of(error)
    if refused is None:
        return False
    return refused.code in codes if isinstance(codes, frozenset) else refused.code is codes
