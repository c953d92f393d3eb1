"""The rooms routes: the same Client calls as the CLI's commands, answering the same JSON
as their ``--json`` output."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Query, Request, Response
from fastapi.responses import FileResponse
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool

from parley.api.access import Identity, Role, identity_of
from parley.api.errors import ApiError
from parley.client.client import Client
from parley.client.turn_report import read_turn_report
from parley.shared.keys import check_room_id
from parley.shared.models import SEED_SENDER, RoomSpec
from parley.shared.spec_limits import MAX_SPEC_DEPTH, SpecTooLarge, check_text_size, create_context
from parley.views import documents
from parley.views.problems import describe_validation

router = APIRouter(tags=["rooms"])
FloorChangeName = Literal["listen", "talk", "instruct"]
# The largest count or seq a query may give: Redis reads counts as signed 64-bit numbers.
QUERY_INT_MAX = 2**63 - 1
# The request body of POST /rooms, for the OpenAPI schema: the body is read and checked
# by hand (as `parley rooms create` reads a file), so its errors name the spec's fields.
SPEC_BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "title": "RoomSpec",
    "description": "A room spec as JSON: the YAML files of examples/rooms/, in JSON."}}}}}


IdentityDep = Annotated[Identity, Depends(identity_of)]
OrgQuery = Annotated[str | None, Query(description="Only this organization's rooms (a "
                                       "cluster-admin's choice; others see their own only)")]


def client_of(request: Request) -> Client:
    """The app's Client (one Redis connection pool for every request)."""
    return request.app.state.client


ClientDep = Annotated[Client, Depends(client_of)]


class Post(BaseModel):
    """A message posted into a room as a person."""

    model_config = ConfigDict(extra="forbid")

    sender: str = SEED_SENDER
    content: str


def parse_spec(body: bytes, max_agents: int) -> RoomSpec:
    """A request body as a spec for a room of at most ``max_agents`` agents, refused as the
    CLI refuses a spec file: too large (413), not JSON (400), not a valid spec (422, naming
    each field)."""
    check_text_size(len(body))
    try:
        document = json.loads(body)
    except RecursionError:
        raise SpecTooLarge("room spec too large: nested too deeply to read "
                           f"(limit {MAX_SPEC_DEPTH} levels)") from None
    except ValueError as error:
        raise ApiError(400, f"the body is not valid JSON: {error}") from None
    try:
        return RoomSpec.model_validate(document, context=create_context(max_agents))
    except ValidationError as error:
        raise ApiError(422, f"invalid room spec: {describe_validation(error)}") from None


@router.post("/rooms", status_code=201, openapi_extra=SPEC_BODY)
async def create_room(request: Request, client: ClientDep, identity: IdentityDep,
                      room: Annotated[str | None, Query(description="The room id (default: the "
                                                        "spec's name and a random suffix)")] = None,
                      org: Annotated[str | None, Query(description="The room's organization "
                                                       "(a cluster-admin's choice; others "
                                                       "create in their own)")] = None
                      ) -> dict[str, Any]:
    """Create a room of the token's organization from a spec without posting into it."""
    body = await request.body()
    organization = identity.scope(org) or identity.organization

    def create() -> dict[str, Any]:
        spec = parse_spec(body, client.settings.max_agents)
        room_id = client.create_room(spec, room, organization)
        return {"room": room_id, "name": spec.name, "policy": spec.policy.kind,
                "agents": [agent.name for agent in spec.agents], "organization": organization}

    return await run_in_threadpool(create)


@router.get("/rooms")
def list_rooms(client: ClientDep, identity: IdentityDep, org: OrgQuery = None,
               limit: Annotated[int, Query(ge=1, le=10_000)] = 100) -> dict[str, Any]:
    """The token's organization's rooms, most recently active first: status, policy,
    holder, messages, cost, and how long the holder's lease has left
    (``lease_ttl_left_s``)."""
    rooms = [summary.model_dump(mode="json")
             for summary in client.rooms(limit, identity.scope(org))]
    return {"rooms": with_lease_left(client, rooms), "lease_ttl_s": client.settings.lease_ttl_s}


@router.get("/rooms/{room}")
def show_room(room: str, client: ClientDep) -> dict[str, Any]:
    """One room: status, run, holder and its lease's time left, usage, streams and their
    caps."""
    return with_lease_left(client, [client.show(room).model_dump(mode="json")])[0]


def with_lease_left(client: Client, rooms: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each room with ``lease_ttl_left_s``: the seconds its lease has left (None when no
    coordinator holds it), read in one round trip; the lease's age is the ttl less this."""
    pipe = client.redis.pipeline(transaction=False)
    for room in rooms:
        pipe.pttl(client.store.keys.lease(room["room"]))
    for room, left_ms in zip(rooms, pipe.execute(), strict=True):
        room["lease_ttl_left_s"] = left_ms / 1000 if left_ms >= 0 else None
    return rooms


@router.get("/rooms/{room}/spec")
def room_spec(room: str, client: ClientDep) -> dict[str, Any]:
    """The room's spec as stored (a spec never holds a secret)."""
    _version, spec = client.store.read_spec(room)
    return spec.model_dump(mode="json")


@router.delete("/rooms/{room}")
def delete_room(room: str, client: ClientDep,
                force: Annotated[bool, Query(description="Even while a coordinator holds it: "
                                             "fence the coordinator out first")] = False
                ) -> dict[str, Any]:
    """Remove a room and everything it holds (409 while a coordinator holds it)."""
    return {"room": room, "deleted": True, "keys": client.delete(room, force)}


@router.post("/rooms/{room}/pause")
def pause_room(room: str, client: ClientDep) -> dict[str, Any]:
    """Pause a room: posts wait and no turn starts (a turn in flight finishes)."""
    return {"room": room, "paused": True, "changed": client.pause(room)}


@router.post("/rooms/{room}/resume")
def resume_room(room: str, client: ClientDep) -> dict[str, Any]:
    """Resume a paused room where it was, the posts that waited included."""
    return {"room": room, "resumed": True, "changed": client.resume(room)}


@router.post("/rooms/{room}/cancel")
def cancel_room(room: str, client: ClientDep,
                reason: Annotated[str, Query(max_length=500)] = "cancelled by request"
                ) -> dict[str, Any]:
    """End the room's run now (stop reason cancelled); a turn in flight is dropped."""
    result = client.cancel(room, reason)
    return {"room": room, "cancelled": result.cancelled, "run": result.run,
            "posts_waiting": result.waiting}


@router.post("/rooms/{room}/archive", response_class=Response,
             responses={200: {"content": {"application/x-ndjson": {}}}})
def archive_room(room: str, client: ClientDep,
                 remove: Annotated[bool, Query(description="Remove the room from Redis once "
                                               "the archive is written")] = False
                 ) -> FileResponse:
    """The room as an archive (JSON lines, as `parley rooms archive` writes), to keep or
    to bring back with `parley rooms import`. The room stays unless ``remove``."""
    check_room_id(room)  # before it names a file: a bad id is a 400, not an OS error
    directory = tempfile.mkdtemp(prefix="parley-archive-")
    path = os.path.join(directory, "room.jsonl")

    def cleanup() -> None:
        for name in os.listdir(directory):
            os.unlink(os.path.join(directory, name))
        os.rmdir(directory)

    try:
        result = client.archive(room, path, keep=not remove)
    except BaseException:
        cleanup()
        raise
    return FileResponse(path, media_type="application/x-ndjson", filename=f"{room}.jsonl",
                        background=BackgroundTask(cleanup),
                        headers={"X-Parley-Removed": "true" if result.removed else "false"})


@router.post("/rooms/import", status_code=201,
             openapi_extra={"requestBody": {"required": True, "content": {
                 "application/x-ndjson": {"schema": {"type": "string"}}}}})
async def import_room(request: Request, client: ClientDep, identity: IdentityDep,
                      room: Annotated[str | None, Query(description="The id to import it "
                                                        "as (default: its own)")] = None
                      ) -> dict[str, Any]:
    """Bring back a room archived by ``POST /rooms/{room}/archive`` (the body: the archive's
    JSON lines). Only a cluster-admin may import another organization's archive (403)."""
    body = await request.body()
    if room is not None:
        check_room_id(room)
    only = None if identity.role is Role.CLUSTER_ADMIN else identity.organization

    def restore() -> str:
        with tempfile.NamedTemporaryFile("wb", suffix=".jsonl") as file:
            file.write(body)
            file.flush()
            return client.import_room(file.name, room, only)

    return {"room": await run_in_threadpool(restore), "imported": True}


@router.post("/rooms/{room}/agents/{agent}/{change}")
def change_floor(room: str, agent: str, change: FloorChangeName, client: ClientDep,
                 text: Annotated[str, Body(embed=True, max_length=20_000)] = "") -> dict[str, Any]:
    """A mention room's floor: ``listen`` (the agent only listens), ``talk`` (it talks
    again), ``instruct`` (queue it at the front for a turn on ``text``)."""
    if change == "instruct":
        change_id = client.instruct(room, agent, text)
    else:
        change_id = getattr(client, change)(room, agent)
    return {"room": room, "agent": agent, "change": change, "id": change_id}


@router.post("/rooms/{room}/messages", status_code=202)
def post_message(room: str, client: ClientDep, post: Annotated[Post, Body()]) -> dict[str, Any]:
    """Post a message as a person (a run starts if the room is idle)."""
    return {"room": room, "inbox_id": client.post(room, post.content, post.sender)}


@router.get("/rooms/{room}/messages")
def read_messages(room: str, client: ClientDep,
                  after_seq: Annotated[int, Query(ge=0, le=QUERY_INT_MAX)] = 0,
                  limit: Annotated[int, Query(ge=1, le=10_000)] = 1000) -> dict[str, Any]:
    """The room's messages after seq ``after_seq``, oldest first, at most ``limit``;
    ``next_after_seq`` is where the next page starts and ``more`` says whether there is
    one already."""
    client.state(room)  # no such room: 404, not an empty page
    messages = client.store.read_messages_from(room, after_seq, limit + 1)
    page = messages[:limit]
    return {"room": room, "messages": [documents.message_json(m) for m in page],
            "next_after_seq": page[-1].seq if page else after_seq,
            "more": len(messages) > limit}


@router.get("/rooms/{room}/turns")
def read_turns(room: str, client: ClientDep,
               last: Annotated[int | None, Query(ge=0, le=QUERY_INT_MAX, description="Only "
                                                 "the newest N decided turns")] = None
               ) -> dict[str, Any]:
    """Each turn's answers (raw and adjusted scores, status, latency, tokens) and the open
    turn's progress, as `parley turns --json`."""
    return documents.turns_json(read_turn_report(client.store, room, last))


@router.get("/rooms/{room}/queue")
def speak_queue(room: str, client: ClientDep) -> dict[str, Any]:
    """A mention room's speak queue (409 for a room of another policy)."""
    try:
        return client.speak_queue(room)
    except ValueError as error:
        raise ApiError(409, str(error)) from None
