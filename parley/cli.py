"""The ``parley`` command."""

from __future__ import annotations

import asyncio
import json
import os
import re
import ssl
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, NamedTuple

import click
import redis
import structlog
import typer
import yaml
from pydantic import ValidationError

from parley import output, run_printer
from parley.client import Client, RunTimeout, load_spec
from parley.shared.connections import redis_kwargs
from parley.shared.events import MessageChunk
from parley.shared.logs import configure_logging, one_line, resolve_format
from parley.shared.models import POLICY_KINDS, Message, RoomSpec, RoomStatus, StopReason
from parley.shared.protocol import DEFAULT_QUEUE
from parley.shared.records import ZERO_TOTALS
from parley.shared.settings import Settings, get_settings, redact_url, variable_name
from parley.shared.spec_limits import SpecTooLarge
from parley.shared.store import RoomExists, RoomNotFound

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Group chats of LLM agents: one speaker per turn, across processes.")
# Exit codes, for scripts: 0 the command did what was asked (a run ended idle, whatever
# its stop reason), 1 a run ended failed, 2 bad input or a Redis that cannot be used,
# 3 a run that did not start or end in time.
EXIT_RUN_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_TIMEOUT = 3
console = output.make_console()
QuietFlag = Annotated[bool, typer.Option("--quiet", "-q", help="The transcript only: no "
                                         "turn lines, the end as one short line")]
# PyYAML names the text it read, not the file: the error line names the file already.
_YAML_SOURCE = re.compile(r'\s+in "<[a-z ]+>", (\S.*)')


class CliError(Exception):
    """A failure to report as one line, without a traceback."""


def describe_validation(error: ValidationError) -> str:
    """Each problem as ``field.path: message``, joined into one line."""
    problems = []
    for item in error.errors():
        loc = list(item["loc"])
        if loc[:1] == ["policy"] and len(loc) > 2 and loc[1] in POLICY_KINDS:
            del loc[1]  # the union's tag: the user wrote policy.threshold, not policy.bid...
        where = ".".join(str(part) for part in loc) or "spec"
        # pydantic prefixes our own rules' messages; the field already says where.
        problems.append(f"{where}: {item['msg'].removeprefix('Value error, ')}")
    return "; ".join(problems)


def describe_invalid(error: ValidationError) -> str:
    """A validation error as one line: a bad setting names its ``PARLEY_*`` variable."""
    if error.title == Settings.__name__:
        return describe_settings(error)
    return f"invalid {error.title}: {describe_validation(error)}"


def describe_settings(error: ValidationError) -> str:
    """Each bad setting as ``invalid setting PARLEY_<FIELD>: message``, joined into one
    line. The value is not shown: it may hold a password."""
    problems = []
    for item in error.errors():
        message = item["msg"].removeprefix("Value error, ")
        if not item["loc"]:  # a rule over several settings names them itself
            problems.append(f"invalid settings: {message}")
            continue
        variable = variable_name(str(item["loc"][0]))
        problems.append(f"invalid setting {variable}: {message.removeprefix(f'{variable}: ')}")
    return "; ".join(problems)


def caused_by(error: BaseException, kind: type[BaseException]) -> bool:
    """True when ``error`` or any exception it was raised from or during is a ``kind``."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def unreachable_redis(url: str, error: BaseException) -> str:
    """Why Redis at ``url`` could not be used, as one line: where (password masked), the
    error, and what to check. TLS is named when the URL asks for it (``rediss://``)."""
    reason = " ".join(str(error).split()) or type(error).__name__
    tls_trouble = caused_by(error, ssl.SSLError) or isinstance(error, redis.TimeoutError)
    if url.startswith("rediss://") and caused_by(error, ssl.SSLCertVerificationError):
        hint = ("the URL asks for TLS (rediss://) and the server's certificate was not "
                "accepted: give its CA in PARLEY_REDIS_TLS_CA_FILE (a PEM file)")
    elif url.startswith("rediss://") and tls_trouble:
        hint = ("the URL asks for TLS (rediss://): is the server speaking TLS on that port, "
                "and answering? A plain Redis needs redis://")
    elif isinstance(error, redis.TimeoutError):
        hint = ("it did not answer in time: is the server hung or overloaded, or "
                "PARLEY_REDIS_URL pointing at something that is not Redis?")
    else:
        hint = "start Redis or point PARLEY_REDIS_URL at one"
    return f"cannot reach Redis at {redact_url(url)} ({reason}); {hint}"


def full_redis(url: str) -> str:
    """Why Redis at ``url`` refused a write, as one line: it is out of memory."""
    return (f"Redis at {redact_url(url)} is out of memory (maxmemory reached) and refuses "
            "writes until memory is freed: raise its maxmemory or free some "
            "(redis-cli INFO memory)")


@contextmanager
def settings_that_work() -> Iterator[None]:
    """For a long-running command's start-up: a setting that cannot work (a bad PARLEY_*
    value, a TLS file missing) is one line and exit 2; once serving, errors keep their
    tracebacks for operators."""
    try:
        yield
    except ValidationError as error:
        message = describe_invalid(error)
    except ValueError as error:  # RedisTlsError and the settings' own checks
        message = str(error)
    else:
        return
    print(f"parley: {one_line(message)}", file=sys.stderr)
    raise typer.Exit(EXIT_BAD_INPUT)


def friendly(command: Callable[..., Any]) -> Callable[..., Any]:
    """Turn expected failures into one clear line on stderr: exit code 3 for a run that
    timed out, 2 for everything else (bad input, a Redis that cannot be used)."""

    @wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        code = EXIT_BAD_INPUT
        try:
            get_settings()
            return command(*args, **kwargs)
        except RunTimeout as error:
            message, code = str(error), EXIT_TIMEOUT
        # A hung server and a TLS mismatch are as much "cannot reach" as a closed port.
        except (redis.ConnectionError, redis.TimeoutError, ssl.SSLError) as error:
            message = unreachable_redis(get_settings().redis_url, error)
        except redis.OutOfMemoryError:
            message = full_redis(get_settings().redis_url)
        except ValidationError as error:
            message = describe_invalid(error)
        except (CliError, RoomNotFound, RoomExists, ValueError) as error:
            message = str(error)
        # Plain print: one line, never wrapped to the terminal's width.
        print(f"parley: {message}", file=sys.stderr)
        raise typer.Exit(code)

    return wrapper


def package_version() -> str:
    """The installed parley package's version."""
    try:
        return metadata.version("parley")
    except metadata.PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


def print_version(asked: bool) -> None:
    """``--version``: print the version and exit before any command runs."""
    if asked:
        print(f"parley {package_version()}")
        raise typer.Exit()


@app.callback()
def options(
    version: Annotated[bool, typer.Option("--version", callback=print_version, is_eager=True,
                                          help="Print parley's version and exit")] = False,
) -> None:
    """Group chats of LLM agents: one speaker per turn, across processes."""


def read_spec(path: Path):  # noqa: ANN201
    """Load a spec file, with load errors as CliError naming the file and field."""
    try:
        return load_spec(path)
    except FileNotFoundError as error:
        raise CliError(f"no such spec file: {path}") from error
    except OSError as error:
        raise CliError(f"cannot read spec file {path}: {error.strerror or error}") from error
    except yaml.YAMLError as error:
        raise CliError(f"{path} is not valid YAML: {describe_yaml(error)}") from error
    except SpecTooLarge as error:
        raise CliError(f"invalid room spec {path}: {error}") from error
    except ValidationError as error:
        raise CliError(one_line(f"invalid room spec {path}: {describe_validation(error)}")) from error


def describe_yaml(error: yaml.YAMLError) -> str:
    """The YAML problem and where it is, as one line."""
    if isinstance(error, yaml.MarkedYAMLError) and error.problem:
        mark = error.problem_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        context = f"{error.context}: " if error.context else ""
        return one_line(f"{context}{error.problem}{where}")
    return one_line(_YAML_SOURCE.sub(r" (\1)", str(error)))


@app.command()
@friendly
def run(
    spec: Annotated[Path, typer.Argument(help="Room spec (YAML or JSON)")],
    task: Annotated[str, typer.Option("--task", "-t", help="The task, posted as message 1")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
    timeout: Annotated[float | None, typer.Option(help="Give up after this many seconds")] = None,
    sender: Annotated[str, typer.Option("--as", help="Who posts the task")] = "User",
    quiet: QuietFlag = False,
) -> None:
    """Run TASK in a new room built from SPEC and print the conversation: under each
    message, the bids (or the policy's decision) of the turn that posted it; last, why the
    run ended and what to do next.

    Exits 1 when the run ends failed (the conversation or JSON object is printed first),
    2 on bad input, 3 when the run does not end within --timeout."""
    room_spec = read_spec(spec)
    configure_logging("console", "WARNING")
    client = Client()
    client.ping()
    room = client.create_room(room_spec)
    inbox_id = client.post(room, task, sender)
    print_run_of(client, room, inbox_id, RunOutput(room_spec, as_json, quiet), timeout)


class RunOutput(NamedTuple):
    """How a run is printed: the room's spec (its turns' lines need it), --json, --quiet,
    and the last turn before the run (only later turns are the run's)."""

    spec: RoomSpec
    as_json: bool
    quiet: bool
    after_turn: int = 0


def print_run_of(client: Client, room: str, inbox_id: str, how: RunOutput,
                 timeout: float | None) -> None:
    """Wait for the run the post ``inbox_id`` joined, printing it as it goes (or as one
    JSON object at its end); exit 1 when it ended failed."""
    if how.as_json:
        result = client.wait(room, inbox_id, timeout)
        records = run_printer.turns_after(client.store, room, how.after_turn)
        print(json.dumps(run_printer.explained_json(how.spec, result, records),
                         ensure_ascii=False))
    elif how.quiet:
        result = client.wait(room, inbox_id, timeout,
                             on_message=lambda message: output.print_message(console, message))
        output.print_run(console, result, printed=True)
    else:
        printer = run_printer.RunPrinter(console, client.store, room, how.spec, how.after_turn)
        result = client.wait(room, inbox_id, timeout, on_message=printer.message)
        printer.finish(result)
    if result.status is RoomStatus.FAILED:
        raise typer.Exit(EXIT_RUN_FAILED)


@app.command()
@friendly
def post(
    room: Annotated[str, typer.Argument(help="Room id")],
    content: Annotated[str, typer.Argument(help="What to say")],
    sender: Annotated[str, typer.Option("--as", help="Who says it")] = "User",
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the run the post joined "
                                       "to end, and print it as parley run does")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="With --wait: one JSON object")
                       ] = False,
    timeout: Annotated[float | None, typer.Option(help="With --wait: give up after this "
                                                  "many seconds")] = None,
    quiet: QuietFlag = False,
) -> None:
    """Post a message into a room (starting a run if the room is idle).

    With --wait, exits as parley run does: 1 when the run ends failed, 3 on --timeout."""
    client = Client()
    if not wait:
        client.post(room, content, sender)
        return
    configure_logging("console", "WARNING")
    state = client.state(room)
    how = RunOutput(client.store.read_spec(room)[1], as_json, quiet,
                    state.turn - 1 if state.turn_open else state.turn)
    print_run_of(client, room, client.post(room, content, sender), how, timeout)


@app.command()
@friendly
def listen(room: Annotated[str, typer.Argument(help="A mention room's id")],
           agent: Annotated[str, typer.Argument(help="The agent that only listens")]) -> None:
    """An agent of a mention room only listens: it keeps its place in the speak queue and
    takes a turn only when a person names it."""
    Client().listen(room, agent)


@app.command()
@friendly
def talk(room: Annotated[str, typer.Argument(help="A mention room's id")],
         agent: Annotated[str, typer.Argument(help="The agent that talks again")]) -> None:
    """A listening agent of a mention room talks again (a wait for it ends)."""
    Client().talk(room, agent)


@app.command()
@friendly
def instruct(room: Annotated[str, typer.Argument(help="A mention room's id")],
             agent: Annotated[str, typer.Argument(help="The agent to instruct")],
             text: Annotated[str, typer.Argument(help="The instruction")]) -> None:
    """Queue AGENT at the front of a mention room for a turn on TEXT (given even while the
    room waits, to a listening agent, or to the agent that just spoke)."""
    Client().instruct(room, agent, text)


@app.command()
@friendly
def regenerate(room: Annotated[str, typer.Argument(help="A mention room's id")]) -> None:
    """Queue, at the front, each agent that answered the last person's message."""
    Client().regenerate(room)


@app.command()
@friendly
def queue(room: Annotated[str, typer.Argument(help="A mention room's id")],
          as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")
                             ] = False) -> None:
    """A mention room's speak queue: who speaks, who is owed a turn, who listens, who
    waits for a person's answer, whether the room waits and whether it is over."""
    view = Client().speak_queue(room)
    if as_json:
        print(json.dumps(view, ensure_ascii=False))
        return
    for name, value in view.items():
        shown = ", ".join(" asked ".join(pair) if isinstance(pair, list) else str(pair)
                          for pair in value) if isinstance(value, list) else value
        console.print(f"{name}: {shown if shown not in ('', None) else '-'}", highlight=False,
                      markup=False)


@app.command()
@friendly
def follow(room: Annotated[str, typer.Argument(help="Room id")],
           after: Annotated[int, typer.Option(help="Start after this seq")] = 0,
           live: Annotated[bool, typer.Option(
               "--live", help="Also print each message as it is written, before it is "
                              "committed")] = False) -> None:
    """Print a room's messages as they are committed, and each run's end (Ctrl-C to
    stop)."""
    client = Client()
    client.state(room)
    writing = LiveText()
    try:
        for item in client.timeline(room, after, **({"chunks": True} if live else {})):
            if isinstance(item, MessageChunk):
                writing.show(item)
                continue
            writing.end()
            if isinstance(item, Message):
                output.print_message(console, item)
            else:
                output.print_run_end(console, item)
    except KeyboardInterrupt:
        pass


class LiveText:
    """``parley follow --live``: a message being written, on a line of its own as its
    chunks come; the committed message is printed after it as usual (it is the truth: a
    call that failed midway leaves its line unfinished, and nothing is committed)."""

    def __init__(self) -> None:
        self.open: tuple[int, int, str] | None = None  # the (turn, phase, agent) shown

    def show(self, chunk: MessageChunk) -> None:
        """Print a chunk, after a header when it starts another call's text."""
        key = (chunk.turn, chunk.phase, chunk.agent)
        if key != self.open or chunk.index == 0:
            self.end()
            console.print(f"... {chunk.agent}: ", end="", style="dim", highlight=False,
                          markup=False)
            self.open = key
        console.print(chunk.text, end="", style="dim", highlight=False, markup=False,
                      soft_wrap=True)

    def end(self) -> None:
        """End the line of the text being shown, if any."""
        if self.open is not None:
            console.print()
            self.open = None


# A stream id as Redis reads it: milliseconds, and optionally -sequence.
_STREAM_ID = re.compile(r"\d{1,20}(-\d{1,20})?\Z")


@app.command()
@friendly
def events(
    room: Annotated[str, typer.Argument(help="Room id")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line")] = False,
    after: Annotated[str, typer.Option(help="Start after this event id")] = "0-0",
    keep_following: Annotated[bool, typer.Option(
        "--follow/--no-follow", help="Wait for new events (Ctrl-C to stop)")] = True,
) -> None:
    """Print a room's events (runs, messages, turns, answers, leases) as they are written,
    from the oldest kept or after --after ID."""
    if not _STREAM_ID.fullmatch(after):
        raise CliError(f"--after {after!r} is not an event id (like 1764500000123-0)")
    client = Client()
    try:
        for event in client.events(room, after, follow=keep_following):
            if as_json:
                print(json.dumps(output.event_json(event), ensure_ascii=False), flush=True)
            else:
                console.print(output.event_line(event), highlight=False, markup=False,
                              soft_wrap=True)
    except KeyboardInterrupt:
        pass


@app.command()
@friendly
def turns(
    room: Annotated[str, typer.Argument(help="Room id")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document")] = False,
    last: Annotated[int | None, typer.Option(min=0, help="Only the newest N decided turns")
                    ] = None,
) -> None:
    """Show each turn's answers (scores raw and adjusted, status, latency, tokens) and, for
    the open turn, who has answered and who is still pending."""
    from parley.turn_report import read_turn_report

    report = read_turn_report(Client().store, room, last)
    if as_json:
        print(json.dumps(output.turns_json(report), ensure_ascii=False))
    else:
        output.print_turns(console, report)


@app.command()
@friendly
def status(room: Annotated[str | None, typer.Argument(help="One room's details")] = None,
           limit: Annotated[int, typer.Option(help="Most rooms to list")] = 20) -> None:
    """Rooms and coordinators, as operators see them."""
    client = Client()
    store = client.store
    ttl = client.settings.lease_ttl_s
    if room is not None:
        state = client.state(room)
        # The totals are shown from zero, also for rooms stored before they were kept.
        console.print_json(json.dumps({**ZERO_TOTALS, **state.raw,
                                       "lease": store.lease_holder(room),
                                       "streams": stream_report(client, room)}))
        return
    rows = []
    failures = []
    for room_id in store.list_rooms(limit):
        try:
            state = store.read_state(room_id)
        except RoomNotFound:  # deleted or expired since it was listed
            continue
        rows.append({"room": room_id, "status": output.status_text(state.status, state.paused),
                     "run": state.run,
                     "turn": state.turn, "last_seq": state.last_seq,
                     "stop_reason": state.stop_reason or "-",
                     "lease": store.lease_holder(room_id) or "-"})
        if state.stop_reason is StopReason.ROOM_ERROR and state.status is RoomStatus.FAILED:
            failures.append(f"room {room_id} failed after {state.failed_takes} take(s): "
                            f"{state.stop_detail}")
    console.print(output.rooms_table(rows))
    for line in failures:
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    coordinators = store.coordinators()
    failing = store.scans_failing([coordinator_id for coordinator_id, _ in coordinators])
    for coordinator_id, age in coordinators:
        health = "live" if age < 3 * ttl else "vanished"
        line = f"coordinator {coordinator_id}: {health}, last heartbeat {age:.1f}s ago"
        if coordinator_id in failing:
            line += f", not ready: {failing[coordinator_id]}"
        console.print(line, highlight=False, markup=False, soft_wrap=True)


def stream_report(client: Client, room: str) -> dict[str, dict[str, Any]]:
    """Each of the room's streams: its length and its cap (``None``: never trimmed; the
    caps are this process's settings, which should match the coordinators' and workers')."""
    settings = client.settings
    caps = {"log": settings.log_stream_maxlen or None, "inbox": None,
            "bids": settings.bids_stream_maxlen,
            "turns": settings.turns_stream_maxlen,
            "dead_letters": settings.dead_letter_stream_maxlen,
            "events": settings.events_stream_maxlen}
    lengths = client.store.stream_lengths(room)
    return {name: {"length": lengths[name], "max_length": cap} for name, cap in caps.items()}


rooms_app = typer.Typer(no_args_is_help=True, help="Create, list, pause, cancel, delete, "
                        "archive and import rooms.")
app.add_typer(rooms_app, name="rooms")
JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON object")]


def print_json(value: Any) -> None:
    """One JSON object on one line."""
    print(json.dumps(value, ensure_ascii=False))


@rooms_app.command("create")
@friendly
def rooms_create(
    spec: Annotated[Path, typer.Argument(help="Room spec (YAML or JSON)")],
    room: Annotated[str | None, typer.Option("--id", help="The room id (default: the "
                                             "spec's name and a random suffix)")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Create a room from SPEC without posting into it; print its id."""
    room_spec = read_spec(spec)
    room_id = Client().create_room(room_spec, room)
    if as_json:
        print_json({"room": room_id, "name": room_spec.name, "policy": room_spec.policy.kind,
                    "agents": [agent.name for agent in room_spec.agents]})
    else:
        print(room_id)


@rooms_app.command("list")
@friendly
def rooms_list(limit: Annotated[int, typer.Option(help="Most rooms to list")] = 100,
               as_json: JsonFlag = False) -> None:
    """Rooms, most recent first: status, policy, last activity, holder, messages, cost."""
    rooms = Client().rooms(limit)
    if as_json:
        print_json({"rooms": [summary.model_dump(mode="json") for summary in rooms]})
    else:
        console.print(output.room_list_table(rooms))


@rooms_app.command("show")
@friendly
def rooms_show(room: Annotated[str, typer.Argument(help="Room id")],
               as_json: JsonFlag = False) -> None:
    """One room: status, run, holder, usage, streams and their caps."""
    details = Client().show(room)
    if as_json:
        print_json(details.model_dump(mode="json"))
    else:
        output.print_room(console, details)


def report_change(room: str, as_json: bool, changed: bool, key: str, done: str, unchanged: str
                  ) -> None:
    """A pause or resume's one line (or JSON object)."""
    if as_json:
        print_json({"room": room, key: True, "changed": changed})
    else:
        print(f"room {room} {done if changed else unchanged}")


@rooms_app.command("pause")
@friendly
def rooms_pause(room: Annotated[str, typer.Argument(help="Room id")],
                as_json: JsonFlag = False) -> None:
    """Pause a room: it keeps taking posts but starts no turn (a turn in flight finishes)."""
    changed = Client().pause(room)
    report_change(room, as_json, changed, "paused",
                  "paused: posts wait and no turn starts until it is resumed",
                  "was already paused")


@rooms_app.command("resume")
@friendly
def rooms_resume(room: Annotated[str, typer.Argument(help="Room id")],
                 as_json: JsonFlag = False) -> None:
    """Resume a paused room where it was, the posts that waited included."""
    changed = Client().resume(room)
    report_change(room, as_json, changed, "resumed", "resumed", "was not paused")


@rooms_app.command("cancel")
@friendly
def rooms_cancel(
    room: Annotated[str, typer.Argument(help="Room id")],
    reason: Annotated[str, typer.Option(help="The stop detail")] = "cancelled by request",
    as_json: JsonFlag = False,
) -> None:
    """End the room's run now (stop reason cancelled); a turn in flight is dropped.

    Nothing of that turn is written, and the coordinator holding the room stops."""
    result = Client().cancel(room, reason)
    if as_json:
        print_json({"room": room, "cancelled": result.cancelled, "run": result.run,
                    "posts_waiting": result.waiting})
    elif result.cancelled:
        waiting = (f"; {result.waiting} post(s) waiting start the next run" if result.waiting
                   else "")
        print(f"room {room}: run {result.run} cancelled{waiting}")
    else:
        print(f"room {room} has no run in progress")


@rooms_app.command("delete")
@friendly
def rooms_delete(
    room: Annotated[str, typer.Argument(help="Room id")],
    force: Annotated[bool, typer.Option("--force", help="Even while a coordinator holds "
                                        "it: fence the coordinator out first")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Remove a room and everything it holds from Redis."""
    removed = Client().delete(room, force)
    if as_json:
        print_json({"room": room, "deleted": True, "keys": removed})
    else:
        print(f"room {room} deleted ({removed} keys)")


@rooms_app.command("archive")
@friendly
def rooms_archive(
    room: Annotated[str, typer.Argument(help="Room id")],
    out: Annotated[Path, typer.Option("--out", help="The archive to write (a new file)")],
    keep: Annotated[bool, typer.Option("--keep", help="Keep the room in Redis")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Write a room to a file as JSON lines, then remove it from Redis (unless --keep).

    The file holds the spec, the state, the log, the turn records, the posts waiting and
    the dead letters; `parley rooms import FILE` brings the same room back."""
    try:
        result = Client().archive(room, out, keep)
    except FileExistsError as error:
        raise CliError(str(error)) from error
    except OSError as error:
        raise CliError(f"cannot write {out}: {error.strerror or error}") from error
    if as_json:
        print_json({"room": room, "path": result.path, "counts": result.counts,
                    "removed": result.removed})
        return
    counts = result.counts
    where = "removed from Redis" if result.removed else "kept in Redis"
    print(f"room {room} archived to {result.path}: {counts['log']} messages, "
          f"{counts['turn']} turn records, {counts['inbox']} posts waiting; {where}")


@rooms_app.command("import")
@friendly
def rooms_import(
    file: Annotated[Path, typer.Argument(help="An archive written by `parley rooms archive`")],
    room: Annotated[str | None, typer.Option("--id", help="Import under this id (default: "
                                             "the archived room's)")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Bring an archived room back into Redis; print its id."""
    client = Client()
    try:
        room_id = client.import_room(file, room)
    except OSError as error:
        raise CliError(f"cannot read {file}: {error.strerror or error}") from error
    if as_json:
        print_json(client.show(room_id).model_dump(mode="json"))
    else:
        print(room_id)


@app.command()
@friendly
def transcript(
    room: Annotated[str, typer.Argument(help="Room id")],
    output_type: Annotated[str, typer.Option(
        "--output-type", "-o", help="text (the whole conversation, one message a line), or "
        "one of GroupChat's output types: str, json, list, dict, final, yaml ...")] = "text",
    as_json: JsonFlag = False,
) -> None:
    """Print a room's conversation."""
    client = Client()
    if as_json:
        client.state(room)  # RoomNotFound for a room that is not there
        print_json({"room": room,
                    "messages": [output.message_json(m) for m in client.messages(room)]})
        return
    formatted = client.transcript(room, output_type)
    print(formatted if isinstance(formatted, str) else json.dumps(formatted, ensure_ascii=False))


HealthPort = Annotated[int | None, typer.Option(
    "--health-port", help="Serve /livez, /readyz and /metrics on this port (0: off; "
    "default PARLEY_HEALTH_PORT, else 8701 for a coordinator, 8702 for a worker)")]


@app.command()
def coordinator(
    coordinator_id: Annotated[str, typer.Option("--id", help="Coordinator id")] = "",
    capacity: Annotated[int | None, typer.Option(help="Most rooms served at once")] = None,
    health_port: HealthPort = None,
) -> None:
    """Serve rooms: lease runnable rooms and run their turns (until SIGTERM)."""
    from parley.coordinator.service import serve_forever
    from parley.coordinator.transport import CeleryTransport
    from parley.shared.health import HealthPortError

    with settings_that_work():
        settings = get_settings()
        if capacity is not None:
            settings = settings.model_copy(update={"coordinator_capacity": capacity})
        redis_kwargs(settings)  # checks the TLS settings before anything connects
        transport = CeleryTransport(settings.broker_url, timeout_s=settings.lease_renew_every_s)
    configure_logging(settings.log_format, settings.log_level)
    try:
        asyncio.run(serve_forever(settings, transport, coordinator_id, health_port))
    except HealthPortError as error:
        print(f"parley: {error}", file=sys.stderr)
        raise typer.Exit(EXIT_BAD_INPUT) from None


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def worker(
    ctx: typer.Context,
    queues: Annotated[str, typer.Option("--queues", "-Q", help="Comma-separated queues")] = DEFAULT_QUEUE,
    concurrency: Annotated[int | None, typer.Option("--concurrency", "-c")] = None,
    pool: Annotated[str | None, typer.Option("--pool", "-P", help="threads, gevent, prefork")] = None,
    hostname: Annotated[str | None, typer.Option(
        "--hostname", "-n", help="Node name (default parley@%h-<pid>: distinct for each "
        "worker of a host)")] = None,
    events: Annotated[bool | None, typer.Option(
        "--task-events/--no-task-events", "-E",
        help="Send task events and heartbeats for Flower and celery events "
             "(default PARLEY_WORKER_TASK_EVENTS, on)")] = None,
    loglevel: Annotated[str, typer.Option(help="Level of Celery's and other libraries' "
                                          "logs (parley's own: PARLEY_LOG_LEVEL)")] = "WARNING",
    health_port: HealthPort = None,
) -> None:
    """Run agent tasks (a Celery worker with an I/O-bound pool).

    Options parley does not know are passed to `celery worker` unchanged, e.g.
    `parley worker --autoscale 64,8 --max-memory-per-child 500000`."""
    with settings_that_work():
        settings = get_settings()
        configure_logging(settings.log_format, settings.log_level, loglevel)
        from parley.workers.app import app as celery_app
        from parley.workers.app import log_celery_notices, stopped_with

    events = settings.worker_task_events if events is None else events
    celery_app.conf.worker_send_task_events = events
    # Celery's default node name is celery@<host>: two workers of one host would share it
    # (a warning, and Flower and inspect mix them up); the pid tells them apart.
    hostname = hostname or f"parley@%h-{os.getpid()}"
    monitoring = ["--hostname", hostname]
    # Event heartbeats only with task events: without them Flower shows a worker whose
    # tasks it sees as offline a couple of minutes after it started.
    monitoring += ["--task-events"] if events else ["--without-heartbeat"]
    monitoring += [] if health_port is None else ["--health-port", str(health_port)]
    # In JSON mode Celery's banner (plain text on stdout) gives way to parley's own
    # start-up line, and its shutdown notices go through logging.
    quiet = resolve_format(settings.log_format) == "json"
    if quiet:
        log_celery_notices()
        structlog.get_logger("parley.worker").info(
            "worker_starting", queues=queues, pool=pool or settings.worker_pool,
            concurrency=concurrency or settings.worker_concurrency, hostname=hostname,
            task_events=events, broker=redact_url(settings.broker_url),
            redis=redact_url(settings.redis_url))
    try:
        celery_app.worker_main([
            *(["--quiet"] if quiet else []),
            "worker", "--queues", queues, "--pool", pool or settings.worker_pool,
            "--concurrency", str(concurrency or settings.worker_concurrency), *monitoring,
            "--loglevel", loglevel, "--without-gossip", "--without-mingle", *ctx.args,
        ])
    except click.ClickException as error:  # a passed-through option Celery does not know
        print(f"parley: celery worker: {error.format_message()}", file=sys.stderr)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    # worker_main drops the worker's exit code: an unrecoverable error (a health port asked
    # for and taken) must not exit 0.
    raise typer.Exit(max(stopped_with, default=0))


@app.command()
def health(
    host: Annotated[str | None, typer.Option(help="Where the process serves its checks "
                                             "(default PARLEY_HEALTH_HOST, on loopback)")] = None,
    port: Annotated[int | None, typer.Option(help="Its health port (default PARLEY_HEALTH_PORT, "
                                             "else 8701 then 8702)")] = None,
    ready: Annotated[bool, typer.Option("--ready", help="Ask whether it is ready (Redis "
                                        "and the broker answer), not only live")] = False,
) -> None:
    """Exec probe for a local coordinator or worker: exit 0 when it answers live (ready
    with --ready), 1 with one line saying why otherwise."""
    from parley.shared.health import COORDINATOR_PORT, WORKER_PORT, probe, probe_host

    try:
        settings = get_settings()
    except ValidationError as error:
        print(f"parley: {describe_invalid(error)}", file=sys.stderr)
        raise typer.Exit(1) from None
    chosen = port or settings.health_port
    ports = [chosen] if chosen else [COORDINATOR_PORT, WORKER_PORT]
    ok, line = probe(probe_host(settings, host), ports, ready)
    print(line, file=sys.stdout if ok else sys.stderr)
    raise typer.Exit(0 if ok else 1)


@app.command()
def api(
    host: Annotated[str | None, typer.Option(help="Address to listen on (default "
                                             "PARLEY_API_HOST, 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default PARLEY_API_PORT, 8700)")
                    ] = None,
) -> None:
    """Serve the HTTP API and the dashboard (until SIGTERM). Without PARLEY_API_TOKENS it
    listens on loopback only."""
    from parley.api.server import check_bind, serve

    with settings_that_work():
        settings = get_settings()
        host = settings.api_host if host is None else host
        redis_kwargs(settings)  # checks the TLS settings before anything connects
        check_bind(settings, host)
    configure_logging(settings.log_format, settings.log_level)
    serve(settings, host, settings.api_port if port is None else port)


@app.command()
@friendly
def demo(
    spec: Annotated[Path | None, typer.Option(
        help="Room spec (default: the scripted launch panel parley ships, offline)")] = None,
    task: Annotated[str, typer.Option(help="The task")] = "Should we launch the beta next week?",
    keep_logs: Annotated[bool, typer.Option("--keep-logs", help="Keep the processes' logs "
                                            "(their folder is named at the end)")] = False,
) -> None:
    """Start a worker and a coordinator, run a scripted room, print it with each turn's
    bids, stop them and remove their logs."""
    from parley.demo import DEMO_SPEC, run_demo

    run_demo(read_spec(spec or DEMO_SPEC), task, console, keep_logs)


def main() -> None:
    """Entry point of the ``parley`` console script."""
    app(prog_name="parley")


if __name__ == "__main__":
    main()
