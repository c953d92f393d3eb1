"""The approvals routes: the tool calls of a room that wait for a person, and a person's
answer, as ``parley approvals --json`` and ``parley approve`` give them."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body
from pydantic import BaseModel, ConfigDict, Field

from parley.api.rooms import ClientDep
from parley.shared.models import SEED_SENDER
from parley.views.documents import approval_json

router = APIRouter(tags=["approvals"])


class ApprovalAnswer(BaseModel):
    """A person's answer to a tool call waiting for approval."""

    model_config = ConfigDict(extra="forbid")

    approve: bool
    by: str = SEED_SENDER
    reason: str = Field(default="", max_length=2000)


@router.get("/rooms/{room}/approvals")
def list_approvals(room: str, client: ClientDep) -> dict[str, Any]:
    """The room's tool calls waiting for an approver (oldest first), and the last ones
    answered (newest first)."""
    pending = client.approvals(room)
    answered = client.answered_approvals(room, last=20)
    return {"room": room, "approvals": [approval_json(a) for a in pending],
            "answered": [approval_json(a) for a in answered],
            "approvers": client.store.approvals.approvers(room)}


@router.post("/rooms/{room}/approvals/{approval_id}")
def answer_approval(room: str, approval_id: str, client: ClientDep,
                    answer: Annotated[ApprovalAnswer, Body()]) -> dict[str, Any]:
    """Approve or deny a pending tool call as one of the room's approvers (403 for anyone
    else, 409 once it is answered, 404 for an unknown id)."""
    answered = client.approve(room, approval_id, answer.approve, answer.by, answer.reason)
    return {"room": room, **approval_json(answered)}
