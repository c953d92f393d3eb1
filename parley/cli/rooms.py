"""``parley rooms``: create, list, show, pause, resume, cancel, delete, archive and import."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from parley.cli import common
from parley.cli.common import JsonFlag, print_json, read_spec
from parley.cli.errors import CliError, file_error, friendly
from parley.shared.models import DEFAULT_ORGANIZATION
from parley.views import terminal

app = typer.Typer(no_args_is_help=True, help="Create, list, pause, cancel, delete, "
                  "archive and import rooms.")


@app.command("create")
@friendly
def rooms_create(
    spec: Annotated[Path, typer.Argument(help="Room spec (YAML or JSON)")],
    room: Annotated[str | None, typer.Option("--id", help="The room id (default: the "
                                             "spec's name and a random suffix)")] = None,
    org: Annotated[str, typer.Option("--org", help="The room's organization (set now, "
                                     "never changed)")] = DEFAULT_ORGANIZATION,
    as_json: JsonFlag = False,
) -> None:
    """Create a room of ORG from SPEC without posting into it; print its id."""
    room_spec = read_spec(spec)
    room_id = common.connect().create_room(room_spec, room, org)
    if as_json:
        print_json({"room": room_id, "name": room_spec.name, "policy": room_spec.policy.kind,
                    "agents": [agent.name for agent in room_spec.agents],
                    "organization": org})
    else:
        print(room_id)


@app.command("list")
@friendly
def rooms_list(limit: Annotated[int, typer.Option(help="Most rooms to list")] = 100,
               org: Annotated[str | None, typer.Option("--org", help="Only this "
                                                       "organization's rooms")] = None,
               as_json: JsonFlag = False) -> None:
    """Rooms, most recent first: status, policy, last activity, holder, messages, cost."""
    rooms = common.connect().rooms(limit, org)
    if as_json:
        print_json({"rooms": [summary.model_dump(mode="json") for summary in rooms]})
    else:
        common.console.print(terminal.room_list_table(rooms))


@app.command("show")
@friendly
def rooms_show(room: Annotated[str, typer.Argument(help="Room id")],
               as_json: JsonFlag = False) -> None:
    """One room: status, run, holder, usage, streams and their caps."""
    details = common.connect().show(room)
    if as_json:
        print_json(details.model_dump(mode="json"))
    else:
        terminal.print_room(common.console, details)


def report_change(room: str, as_json: bool, changed: bool, key: str, done: str, unchanged: str
                  ) -> None:
    """A pause or resume's one line (or JSON object)."""
    if as_json:
        print_json({"room": room, key: True, "changed": changed})
    else:
        print(f"room {room} {done if changed else unchanged}")


@app.command("pause")
@friendly
def rooms_pause(room: Annotated[str, typer.Argument(help="Room id")],
                as_json: JsonFlag = False) -> None:
    """Pause a room: it keeps taking posts but starts no turn (a turn in flight finishes)."""
    changed = common.connect().pause(room)
    report_change(room, as_json, changed, "paused",
                  "paused: posts wait and no turn starts until it is resumed",
                  "was already paused")


@app.command("resume")
@friendly
def rooms_resume(room: Annotated[str, typer.Argument(help="Room id")],
                 as_json: JsonFlag = False) -> None:
    """Resume a paused room where it was, the posts that waited included."""
    changed = common.connect().resume(room)
    report_change(room, as_json, changed, "resumed", "resumed", "was not paused")


@app.command("cancel")
@friendly
def rooms_cancel(
    room: Annotated[str, typer.Argument(help="Room id")],
    reason: Annotated[str, typer.Option(help="The stop detail")] = "cancelled by request",
    as_json: JsonFlag = False,
) -> None:
    """End the room's run now (stop reason cancelled); a turn in flight is dropped.

    Nothing of that turn is written, and the coordinator holding the room stops."""
    result = common.connect().cancel(room, reason)
    if as_json:
        print_json({"room": room, "cancelled": result.cancelled, "run": result.run,
                    "posts_waiting": result.waiting})
    elif result.cancelled:
        waiting = (f"; {result.waiting} post(s) waiting start the next run" if result.waiting
                   else "")
        print(f"room {room}: run {result.run} cancelled{waiting}")
    else:
        print(f"room {room} has no run in progress")


@app.command("delete")
@friendly
def rooms_delete(
    room: Annotated[str, typer.Argument(help="Room id")],
    force: Annotated[bool, typer.Option("--force", help="Even while a coordinator holds "
                                        "it: fence the coordinator out first")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Remove a room and everything it holds from Redis."""
    removed = common.connect().delete(room, force)
    if as_json:
        print_json({"room": room, "deleted": True, "keys": removed})
    else:
        print(f"room {room} deleted ({removed} keys)")


@app.command("archive")
@friendly
def rooms_archive(
    room: Annotated[str, typer.Argument(help="Room id")],
    file: Annotated[Path | None, typer.Argument(help="The archive to write (a new file)",
                                                show_default=False)] = None,
    out: Annotated[Path | None, typer.Option("--out", help="The archive to write, as FILE",
                                             show_default=False)] = None,
    keep: Annotated[bool, typer.Option("--keep", help="Keep the room in Redis")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Write a room to FILE as JSON lines, then remove it from Redis (unless --keep).

    The file holds the spec, the state, the log, the turn records, the posts waiting and
    the dead letters; `parley rooms import FILE` brings the same room back."""
    out = archive_file(file, out)
    try:
        result = common.connect().archive(room, out, keep)
    except FileExistsError as error:
        raise CliError(str(error)) from error
    except OSError as error:
        raise file_error("write", out, error) from error
    if as_json:
        print_json({"room": room, "path": result.path, "counts": result.counts,
                    "removed": result.removed})
        return
    counts = result.counts
    where = "removed from Redis" if result.removed else "kept in Redis"
    print(f"room {room} archived to {result.path}: {counts['log']} messages, "
          f"{counts['turn']} turn records, {counts['inbox']} posts waiting; {where}")


def archive_file(file: Path | None, out: Path | None) -> Path:
    """The one file ``rooms archive`` writes, given as FILE or (as before) ``--out``."""
    if file is not None and out is not None and file != out:
        raise CliError(f"rooms archive was given two files ({file} and --out {out}): "
                       "give one")
    chosen = file or out
    if chosen is None:
        raise CliError("rooms archive needs the file to write: parley rooms archive ROOM FILE")
    return chosen


@app.command("import")
@friendly
def rooms_import(
    file: Annotated[Path, typer.Argument(help="An archive written by `parley rooms archive`")],
    room: Annotated[str | None, typer.Option("--id", help="Import under this id (default: "
                                             "the archived room's)")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Bring an archived room back into Redis; print its id."""
    client = common.connect()
    try:
        room_id = client.import_room(file, room)
    except OSError as error:
        raise file_error("read", file, error) from error
    if as_json:
        print_json(client.show(room_id).model_dump(mode="json"))
    else:
        print(room_id)

