"""The ``parley`` command."""

from __future__ import annotations

import asyncio
import json
import re
import ssl
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from pathlib import Path
from typing import Annotated, Any

import redis
import typer
import yaml
from pydantic import ValidationError
from rich.console import Console

from parley import output
from parley.client import Client, RunTimeout, load_spec
from shared.connections import redis_kwargs
from shared.logs import configure_logging, one_line
from shared.models import POLICY_KINDS, Message, RoomStatus, StopReason
from shared.protocol import DEFAULT_QUEUE
from shared.settings import get_settings, redact_url
from shared.spec_limits import SpecTooLarge
from shared.store import RoomExists, RoomNotFound

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Group chats of LLM agents: one speaker per turn, across processes.")
console = Console()
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
        problems.append(f"{where}: {item['msg']}")
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


@contextmanager
def settings_that_work() -> Iterator[None]:
    """For a long-running command's start-up: a setting that cannot work (a bad PARLEY_*
    value, a TLS file missing) is one line and exit 2; once serving, errors keep their
    tracebacks for operators."""
    try:
        yield
    except ValidationError as error:
        message = f"invalid {error.title}: {describe_validation(error)}"
    except ValueError as error:  # RedisTlsError and the settings' own checks
        message = str(error)
    else:
        return
    print(f"parley: {one_line(message)}", file=sys.stderr)
    raise typer.Exit(2)


def friendly(command: Callable[..., Any]) -> Callable[..., Any]:
    """Turn expected failures into one clear line on stderr and exit code 2."""

    @wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            get_settings()
            return command(*args, **kwargs)
        # A hung server and a TLS mismatch are as much "cannot reach" as a closed port.
        except (redis.ConnectionError, redis.TimeoutError, ssl.SSLError) as error:
            message = unreachable_redis(get_settings().redis_url, error)
        except ValidationError as error:
            message = f"invalid {error.title}: {describe_validation(error)}"
        except (CliError, RunTimeout, RoomNotFound, RoomExists, ValueError) as error:
            message = str(error)
        # Plain print: one line, never wrapped to the terminal's width.
        print(f"parley: {message}", file=sys.stderr)
        raise typer.Exit(2)

    return wrapper


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
) -> None:
    """Run TASK in a new room built from SPEC and print the conversation."""
    room_spec = read_spec(spec)
    configure_logging("console", "WARNING")
    client = Client()
    client.ping()
    live = None if as_json else (lambda message: output.print_message(console, message))
    result = client.run(room_spec, task, timeout_s=timeout, on_message=live)
    if as_json:
        print(json.dumps(output.run_json(result), ensure_ascii=False))
    else:
        output.print_run(console, result, printed=True)


@app.command()
@friendly
def post(
    room: Annotated[str, typer.Argument(help="Room id")],
    content: Annotated[str, typer.Argument(help="What to say")],
    sender: Annotated[str, typer.Option("--as", help="Who says it")] = "User",
) -> None:
    """Post a message into a room (starting a run if the room is idle)."""
    Client().post(room, content, sender)


@app.command()
@friendly
def follow(room: Annotated[str, typer.Argument(help="Room id")],
           after: Annotated[int, typer.Option(help="Start after this seq")] = 0) -> None:
    """Print a room's messages as they are committed, and each run's end (Ctrl-C to
    stop)."""
    client = Client()
    client.state(room)
    try:
        for item in client.timeline(room, after):
            if isinstance(item, Message):
                output.print_message(console, item)
            else:
                output.print_run_end(console, item)
    except KeyboardInterrupt:
        pass


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
        console.print_json(json.dumps({**state.raw, "lease": store.lease_holder(room),
                                       "streams": stream_report(client, room)}))
        return
    rows = []
    failures = []
    for room_id in store.list_rooms(limit):
        state = store.read_state(room_id)
        rows.append({"room": room_id, "status": state.status.value, "run": state.run,
                     "turn": state.turn, "last_seq": state.last_seq,
                     "stop_reason": state.stop_reason or "-",
                     "lease": store.lease_holder(room_id) or "-"})
        if state.stop_reason is StopReason.ROOM_ERROR and state.status is RoomStatus.FAILED:
            failures.append(f"room {room_id} failed after {state.failed_takes} take(s): "
                            f"{state.stop_detail}")
    console.print(output.rooms_table(rows))
    for line in failures:
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    for coordinator_id, age in store.coordinators():
        health = "live" if age < 3 * ttl else "vanished"
        console.print(f"coordinator {coordinator_id}: {health}, last heartbeat {age:.1f}s ago",
                      highlight=False)


def stream_report(client: Client, room: str) -> dict[str, dict[str, Any]]:
    """Each of the room's streams: its length and its cap (``None``: never trimmed; the
    caps are this process's settings, which should match the coordinators' and workers')."""
    settings = client.settings
    caps = {"log": None, "inbox": None, "bids": settings.bids_stream_maxlen,
            "turns": settings.turns_stream_maxlen,
            "dead_letters": settings.dead_letter_stream_maxlen,
            "events": settings.events_stream_maxlen}
    lengths = client.store.stream_lengths(room)
    return {name: {"length": lengths[name], "max_length": cap} for name, cap in caps.items()}


@app.command()
def coordinator(
    coordinator_id: Annotated[str, typer.Option("--id", help="Coordinator id")] = "",
    capacity: Annotated[int | None, typer.Option(help="Most rooms served at once")] = None,
) -> None:
    """Serve rooms: lease runnable rooms and run their turns (until SIGTERM)."""
    from coordinator.service import serve_forever
    from coordinator.transport import CeleryTransport

    with settings_that_work():
        settings = get_settings()
        if capacity is not None:
            settings = settings.model_copy(update={"coordinator_capacity": capacity})
        redis_kwargs(settings)  # checks the TLS settings before anything connects
        transport = CeleryTransport(settings.broker_url, timeout_s=settings.lease_renew_every_s)
    configure_logging(settings.log_format, settings.log_level)
    asyncio.run(serve_forever(settings, transport, coordinator_id))


@app.command()
def worker(
    queues: Annotated[str, typer.Option("--queues", "-Q", help="Comma-separated queues")] = DEFAULT_QUEUE,
    concurrency: Annotated[int | None, typer.Option("--concurrency", "-c")] = None,
    pool: Annotated[str | None, typer.Option("--pool", "-P", help="threads, gevent, prefork")] = None,
    loglevel: Annotated[str, typer.Option()] = "WARNING",
) -> None:
    """Run agent tasks (a Celery worker with an I/O-bound pool)."""
    with settings_that_work():
        settings = get_settings()
        configure_logging(settings.log_format, settings.log_level)
        from workers.app import app as celery_app

    celery_app.worker_main([
        "worker", "--queues", queues, "--pool", pool or settings.worker_pool,
        "--concurrency", str(concurrency or settings.worker_concurrency),
        "--loglevel", loglevel, "--without-gossip", "--without-mingle", "--without-heartbeat",
    ])


@app.command()
@friendly
def demo(
    spec: Annotated[Path, typer.Option(help="Room spec")] = Path("examples/rooms/demo.yaml"),
    task: Annotated[str, typer.Option(help="The task")] = "Should we launch the beta next week?",
) -> None:
    """Start a worker and a coordinator, run a scripted room, print it, stop them."""
    from parley.demo import run_demo

    run_demo(read_spec(spec), task, console)


def main() -> None:
    """Entry point of the ``parley`` console script."""
    app(prog_name="parley")


if __name__ == "__main__":
    main()
