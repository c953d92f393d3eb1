"""How a decided turn is told: the line's shapes, and the pieces every policy's telling
shares. Each policy's record tells its own turns (``explain``) from the turn's record and
the room's spec, so what is shown is what was recorded; parley's views print them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from parley.shared.models import Answer, AnswerStatus

# What became of a call, as the line says it.
OUTCOMES = {AnswerStatus.ERROR: "failed", AnswerStatus.UNPARSED: "unparsed",
            AnswerStatus.TIMEOUT: "timed out"}


@dataclass(frozen=True)
class ShownAnswer:
    """One call's answer as the line shows it: a raw score (and the adjusted one where the
    recency penalty applied), or why there is none."""

    agent: str
    kind: str
    outcome: str  # bid, silent (no message), failed, unparsed, timed out
    score: float | None = None
    adjusted: float | None = None
    error_kind: str | None = None

    def text(self) -> str:
        """``Skeptic 0.75→0.45 (recency)``, ``Economist silent``, ``Ethicist failed
        (scripted)``."""
        if self.outcome != "bid":
            return f"{self.agent} {self.outcome}" + (f" ({self.error_kind})"
                                                     if self.error_kind else "")
        shown = f"{self.agent} {self.score:.2f}"
        if self.adjusted is not None:
            shown += f"→{self.adjusted:.2f} (recency)"
        return shown


@dataclass(frozen=True)
class TurnLine:
    """A decided turn's facts: who spoke, each answer, the policy's decision in words
    (``notes``) and as fields (``decision``), and each tool call its answers made, told
    (``tools``: every policy's turn alike, see parley.views.explain)."""

    turn: int
    run: int
    policy: str
    winner: str | None
    answers: tuple[ShownAnswer, ...] = ()
    notes: tuple[str, ...] = ()
    decision: dict[str, Any] = field(default_factory=dict)
    tools: tuple[str, ...] = ()

    def text(self) -> str:
        """The one line: the bids (bid rooms), then the notes, then the tool calls."""
        parts = ["bids: " + ", ".join(a.text() for a in self.answers)] if self.answers else []
        return " · ".join([*parts, *self.notes, *self.tools])

    def shown_alone(self) -> str:
        """The line where no message of its turn sits above it (a turn that posted
        nothing): after ``turn N, nothing posted``. Empty when there is nothing to say."""
        text = self.text()
        return f"turn {self.turn}, nothing posted · {text}" if text and self.winner is None else text

    def as_json(self) -> dict[str, Any]:
        """The same facts as fields, with the line itself."""
        return {"turn": self.turn, "run": self.run, "winner": self.winner,
                "answers": [asdict(answer) for answer in self.answers],
                "notes": list(self.notes), **self.decision, "tools": list(self.tools),
                "line": self.text()}


def answer_of(answer: Answer, adjusted: float | None = None) -> ShownAnswer:
    """A call's answer for the line; ``adjusted`` is shown only where it differs."""
    kind = answer.error_kind.value or None
    if answer.status is not AnswerStatus.OK:
        return ShownAnswer(answer.agent, answer.kind.value, OUTCOMES[answer.status],
                           error_kind=kind)
    if not answer.message:  # as the policy has it: an empty message never wins
        return ShownAnswer(answer.agent, answer.kind.value, "silent")
    penalised = adjusted is not None and abs(adjusted - answer.score) > 1e-9
    return ShownAnswer(answer.agent, answer.kind.value, "bid", answer.score,
                       adjusted if penalised else None)


def failure_note(answer: Answer) -> str:
    """``Skeptic could not respond (timeout)``: a reply that left nothing to post."""
    kind = answer.error_kind.value or ("empty reply" if answer.status is AnswerStatus.OK
                                       else answer.status.value)
    return f"{answer.agent} could not respond ({kind})"
