"""A background task's relay turn in a room whose policy has no speak queue (seed 003,
"Talking and working: tasks"): at the next turn boundary the turn loop gives the task's
agent a turn of its own in which it is told the result and says it; the room's policy is
not asked for that turn. Pure: the turn loop does the I/O.

==============  =====================================================================
rule            behaviour
==============  =====================================================================
which task      the oldest finished task waiting in the handbacks zset whose
                ``relay_as`` is ``turn`` (one relay turn per turn boundary)
no run          the relay turn opens a new run, as a post would, and is its first turn
call            one ``speak`` call to the task's agent, the relay instruction
                (``shared.tasks.relay_instruction``) as its input
posted          the agent's reply under its name (cut where it speaks for another)
failed call     the result as ``hand_back: post`` would post it: a result is never lost
the policy      its fields and the recent speakers are left as they were, and the turn
                is not counted in ``run_turns``: the rotation goes on after it (a
                round-table's next panelist still speaks)
stop            none: the run goes on under its policy
record          the turn record's ``relay`` names the task
==============  =====================================================================
"""

from __future__ import annotations

from collections.abc import Iterable

from parley.coordinator.policies import Calls, Decision, TurnView
from parley.coordinator.policies.impersonation import cut_answers
from parley.shared.models import Answer, AnswerStatus, CallKind, RoomSpec
from parley.shared.tasks import Task, posted_result, relay_instruction

RELAY_TURN = "turn"  # a task's relay_as when its result is relayed in a turn of its own


def waiting_relay(waiting: Iterable[str], tasks: dict[str, Task]) -> Task | None:
    """The first task of the handbacks zset's ids (oldest first) to relay in a turn."""
    for task_id in waiting:
        task = tasks.get(task_id)
        if task is not None and task.relay_as == RELAY_TURN and not task.handed_back:
            return task
    return None


def relay_calls(task: Task) -> Calls:
    """The relay turn's one call: the task's agent, told the result."""
    instruction = relay_instruction(task, task.status, task.result, task.error)
    return Calls(CallKind.SPEAK, (task.agent,), ((task.agent, instruction),))


def relay_decision(spec: RoomSpec, view: TurnView, task: Task,
                   answers: list[Answer]) -> Decision:
    """The relay turn's outcome: the agent's words, or the result as it is when its call
    gave none; the policy's state untouched."""
    kept, cuts = cut_answers(spec, answers)
    said = next((answer.message.strip() for answer in kept if answer.agent == task.agent
                 and answer.status is AnswerStatus.OK and answer.message.strip()), "")
    return Decision(winner=task.agent, message=said or posted_result(task),
                    recent=view.recent, cuts=cuts, relay=task.id)
