"""The docs' reference pages, made from the code at build time (mkdocs-gen-files runs this):
the room spec from its JSON Schema, the settings from shared/settings.py, the CLI from its
command definitions, the HTTP API from its OpenAPI schema, the events and the metrics from
their definitions. Each `write_*` returns the page's Markdown, so tests can read it too."""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

ROOT = Path(__file__).resolve().parents[2]


def cell(text: Any) -> str:
    """Text fit for one Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def code(value: Any) -> str:
    return "`" + json.dumps(value, ensure_ascii=False).replace("|", "\\|") + "`"


# --- the room spec -------------------------------------------------------------------------

SPEC_MODELS = ("RoomSpec", "AgentSpec", "BidPolicy", "SelectorPolicy", "SelectorSpec",
               "RoundtablePolicy", "MentionPolicy", "DispatchSpec", "HandoffPolicy",
               "RoomLimits", "ScriptEntry", "ScriptedToolCall")
BOUNDS = (("minimum", ">= {}"), ("exclusiveMinimum", "> {}"), ("maximum", "<= {}"),
          ("exclusiveMaximum", "< {}"), ("minLength", "at least {} characters"),
          ("maxLength", "at most {} characters"), ("minItems", "at least {} items"),
          ("maxItems", "at most {} items"))


def type_of(field: dict[str, Any]) -> str:
    if "$ref" in field:
        name = field["$ref"].rsplit("/", 1)[1]
        return f"[{name}](#{name.lower()})" if name in SPEC_MODELS else "any JSON value"
    if "const" in field:
        return code(field["const"])
    if "enum" in field:
        return " or ".join(code(value) for value in field["enum"])
    for union in ("anyOf", "oneOf"):
        if union in field:
            return " or ".join(type_of(option) for option in field[union])
    kind = field.get("type", "any")
    if kind == "array":
        return f"list of {type_of(field.get('items', {}))}"
    if kind == "object" and "additionalProperties" in field:
        return f"mapping to {type_of(field['additionalProperties'])}"
    return str(kind)


def bounds_of(field: dict[str, Any]) -> str:
    found = []
    for option in [field, *field.get("anyOf", [])]:
        found += [text.format(option[key]) for key, text in BOUNDS if key in option]
    return ", ".join(found)


def write_room_spec() -> str:
    from parley.shared.spec_schema import room_spec_schema

    schema = room_spec_schema()
    models = {"RoomSpec": schema, **schema["$defs"]}
    lines = ["# Room spec", "",
             "Every field a room spec may hold, made from the spec models (what `parley schema` "
             "prints, also [as a file](room-spec.schema.json)). Editors that read "
             "`# yaml-language-server: $schema=...` lines (the examples carry one) complete and "
             "check specs with it. Unknown fields are errors.", ""]
    for name in SPEC_MODELS:
        model = models[name]
        required = set(model.get("required", []))
        lines += [f"## {name}", "", cell(model.get("description", "")), "",
                  "| field | type | default | bounds | description |", "|---|---|---|---|---|"]
        for field_name, field in model["properties"].items():
            default = "required" if field_name in required else (
                code(field["default"]) if "default" in field else "")
            lines.append(f"| `{field_name}` | {type_of(field)} | {default} | {bounds_of(field)} "
                         f"| {cell(field.get('description', ''))} |")
        lines.append("")
    return "\n".join(lines)


# --- settings ------------------------------------------------------------------------------

def setting_comments() -> dict[str, str]:
    """Each Settings field's comment lines just above it, from the source."""
    source = (ROOT / "shared" / "settings.py").read_text()
    lines = source.splitlines()
    tree = ast.parse(source)
    settings = next(node for node in tree.body
                    if isinstance(node, ast.ClassDef) and node.name == "Settings")
    comments = {}
    for node in settings.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            above, number = [], node.lineno - 2
            while number >= 0 and lines[number].strip().startswith("#"):
                above.insert(0, lines[number].strip().lstrip("#").strip())
                number -= 1
            comments[node.target.id] = " ".join(above)
    return comments


def write_settings() -> str:
    from parley.shared.settings import Settings, variable_name

    comments = setting_comments()
    lines = ["# Settings", "",
             "Every process reads its settings once at start-up from `PARLEY_*` environment "
             "variables and the `.env` file of its working directory (variables win). Made from "
             "`shared/settings.py`; [Configuration](../operations/configuration.md) says how "
             "they fit together.", "",
             "| variable | default | what it does |", "|---|---|---|"]
    for name, field in Settings.model_fields.items():
        default = field.get_default(call_default_factory=True)
        if isinstance(default, tuple | list | frozenset | set):
            default = ",".join(map(str, default))
        shown = code(default) if default not in ("", None) else ""
        about = " ".join(part for part in (field.description or "", comments.get(name, "")) if part)
        lines.append(f"| `{variable_name(name)}` | {shown} | {cell(about)} |")
    return "\n".join(lines) + "\n"


# --- the CLI -------------------------------------------------------------------------------

def write_cli() -> str:
    import typer

    from parley.cli import app

    lines = ["# Command line", "",
             "Every `parley` command with its arguments and options, made from the command "
             "definitions (`parley COMMAND --help` prints the same).", ""]

    # Duck-typed: typer carries its own copy of click's classes.
    def walk(command: Any, path: list[str]) -> None:
        context = command.context_class(command, info_name=" ".join(path))
        if hasattr(command, "list_commands"):
            for name in command.list_commands(context):
                walk(command.get_command(context, name), [*path, name])
            return
        lines.extend([f"## {' '.join(path)}", "", "```", command.get_usage(context), "```", "",
                      inspect.cleandoc(command.help or ""), ""])
        rows = []
        for param in command.params:
            if getattr(param, "hidden", False):
                continue
            if param.param_type_name == "argument":
                names = f"`{param.metavar or param.name.upper()}`"
            else:
                names = ", ".join(f"`{name}`" for name in [*param.opts, *param.secondary_opts])
            rows.append(f"| {names} | {cell(getattr(param, 'help', None) or '')} |")
        if rows:
            lines.extend(["| argument or option | what it does |", "|---|---|", *rows, ""])

    walk(typer.main.get_command(app), ["parley"])
    return "\n".join(lines)


# --- the HTTP API --------------------------------------------------------------------------

def write_http_api() -> str:
    from parley.api.app import make_app
    from parley.shared.settings import Settings

    schema = make_app(Settings()).openapi()
    lines = ["# HTTP API", "",
             f"`parley api` serves these routes (OpenAPI {schema['openapi']}; made from the app's "
             "own schema). [HTTP API](../operations/http-api.md) in Operations says how they "
             "behave.", "", cell(schema["info"].get("description", "")), ""]
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            lines += [f"## {method.upper()} {path}", "",
                      inspect.cleandoc(operation.get("description") or operation.get("summary", "")),
                      ""]
            params = operation.get("parameters", [])
            if params:
                lines += ["| parameter | in | required | what it is |", "|---|---|---|---|"]
                lines += [f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} "
                          f"| {cell(p.get('description', ''))} |" for p in params]
                lines.append("")
            answers = ", ".join(f"{status} {cell(answer.get('description', ''))}"
                                for status, answer in operation.get("responses", {}).items())
            lines += [f"Answers: {answers}.", ""]
    return "\n".join(lines)


# --- events and metrics --------------------------------------------------------------------

def event_comments() -> dict[str, str]:
    """Each EventType member's comment, from the source: what the event tells."""
    told = {}
    for line in (ROOT / "shared" / "events.py").read_text().splitlines():
        name, _, comment = line.partition("#")
        if " = \"" in name and comment:
            told[name.split("=")[1].strip().strip('"')] = comment.strip()
    return told


def write_events() -> str:
    from parley.shared import events

    lines = ["# Events", "",
             "What `parley events ROOM --json`, `GET /rooms/{room}/events` and `GET /events` "
             "carry: one object per event, with `type` and the fields below (made from "
             "`shared/events.py`). Every event also has `id` (its stream id) and `ts`.", ""]
    told = event_comments()
    for kind in events.EventType:
        cls = getattr(events, "".join(part.title() for part in kind.value.split("_")), None)
        lines += [f"## {kind.value}", "", cell(told.get(kind.value, "")).capitalize() + ".", ""]
        if cls is not None:
            fields = [name for name in cls.model_fields if name not in events.Event.model_fields]
            lines += ["Written by " + inspect.cleandoc(cls.__doc__ or ""), "",
                      "Fields: " + ", ".join(f"`{name}`" for name in fields) + ".", ""]
    return "\n".join(lines)


def write_metrics() -> str:
    from prometheus_client.metrics import MetricWrapperBase

    from parley.api import metrics as api_metrics
    from parley.shared import metrics as shared_metrics

    lines = ["# Metrics", "",
             "Each coordinator and worker serves these on its metrics port, `parley api` its own "
             "on `/metrics` (made from `shared/metrics.py` and `parley/api/metrics.py`; counters "
             "have the `_total` suffix on the wire).", "",
             "| metric | type | labels | what it counts |", "|---|---|---|---|"]
    for module in (shared_metrics, api_metrics):
        for value in vars(module).values():
            if isinstance(value, MetricWrapperBase):
                labels = ", ".join(f"`{label}`" for label in value._labelnames)
                lines.append(f"| `{value._name}` | {value._type} | {labels} "
                             f"| {cell(value._documentation)} |")
    return "\n".join(lines) + "\n"


# --- each policy's rules, from its module's docstring ---------------------------------------

POLICY_PAGES = ("bid", "selector", "roundtable", "mention", "handoff")


def rst_to_markdown(text: str) -> str:
    """A policy docstring's paragraphs and simple tables (a header row and rows between
    three ``=====  =====`` borders) as Markdown; ``code`` becomes `code`."""
    out: list[str] = []
    rows: list[list[str]] = []
    columns: list[int] = []
    borders = 0
    for line in text.splitlines():
        if line.startswith("=") and set(line) <= {"=", " "}:
            borders += 1
            columns = [found.start() for found in re.finditer(r"=+", line)]
            if borders == 3:
                header, *body = rows
                out += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
                        *("| " + " | ".join(cell(value) for value in row) + " |" for row in body)]
                rows, borders = [], 0
        elif borders == 0:
            out.append(line)
        else:
            values = [line[start:end].strip()
                      for start, end in zip(columns, [*columns[1:], None], strict=True)]
            if values[0] or not rows:
                rows.append(values)
            else:  # the row above goes on
                rows[-1] = [f"{old} {new}".strip() for old, new in zip(rows[-1], values, strict=True)]
    return re.sub(r"``([^`]+)``", r"`\1`", "\n".join(out))


def policy_rules(kind: str) -> str:
    source = (ROOT / "coordinator" / "policies" / f"{kind}.py").read_text()
    doc = ast.get_docstring(ast.parse(source)) or ""
    return ("\n## The rules\n\nFrom `coordinator/policies/" + kind + ".py`, the policy itself:\n\n"
            + rst_to_markdown(doc.split("\n", 1)[1].strip()) + "\n")


PAGES = {
    "reference/room-spec.md": write_room_spec,
    "reference/settings.md": write_settings,
    "reference/cli.md": write_cli,
    "reference/http-api.md": write_http_api,
    "reference/events.md": write_events,
    "reference/metrics.md": write_metrics,
}


def write_pages() -> None:
    import mkdocs_gen_files

    for page, write in PAGES.items():
        with mkdocs_gen_files.open(page, "w") as out:
            out.write(write())
    for kind in POLICY_PAGES:
        with mkdocs_gen_files.open(f"policies/{kind}.md", "a") as out:
            out.write(policy_rules(kind))
    # The benchmark figures, as make bench wrote them.
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    with mkdocs_gen_files.open("benchmarks/results.md", "w") as out:
        out.write(results.replace("](README.md)", "](performance.md)"))


write_pages()
