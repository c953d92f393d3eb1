"""The dependency direction of docs/architecture.md, "Package layout": parley ->
coordinator, workers -> shared; the coordinator never imports the workers' code or
litellm, and neither does ``import parley``; no module of the package is in an import
cycle, and the API does not import the CLI."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import parley


def imported_after(statement: str) -> set[str]:
    """Packages loaded by ``statement`` in a fresh interpreter: top-level names, and
    parley's own subpackages as ``parley.<name>``."""
    code = (f"{statement}\nimport sys\n"
            "print(' '.join(sorted({'.'.join(m.split('.')[:2]) if m.startswith('parley.') "
            "else m.split('.')[0] for m in sys.modules})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          check=True)
    return set(done.stdout.split())


@pytest.mark.parametrize("statement", [
    "import parley",
    "import parley.coordinator.service, parley.coordinator.turn_loop, parley.coordinator.transport",
])
def test_front_door_and_coordinator_load_no_worker_code(statement):
    loaded = imported_after(statement)
    assert "parley.workers" not in loaded
    assert "litellm" not in loaded


def test_nothing_loads_under_a_bare_folder_name():
    loaded = imported_after("import parley, parley.cli, parley.coordinator.service, parley.workers.tasks")
    assert not loaded & {"coordinator", "workers", "shared"}


# -- the import graph, read from the source ------------------------------------------------

PACKAGE_DIR = Path(parley.__file__).parent


@dataclass(frozen=True)
class ImportLine:
    """One import statement: the module it is in, what it imports, and where."""

    module: str
    target: str
    line: int
    in_function: bool
    has_comment: bool


def package_modules() -> dict[str, Path]:
    """Every module of the package by dotted name, the linked folders' too."""
    modules = {}
    for folder, dirs, files in os.walk(PACKAGE_DIR, followlinks=True):
        dirs[:] = [name for name in dirs if name != "__pycache__"]
        for name in files:
            if name.endswith(".py"):
                path = Path(folder, name)
                parts = ["parley", *path.relative_to(PACKAGE_DIR).with_suffix("").parts]
                modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


MODULES = package_modules()


def targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The package's modules a statement imports: ``from a import b`` is the module
    ``a.b`` where there is one, else ``a`` itself (``b`` is a name in it); and the packages
    around it that ``module`` is not in, whose ``__init__`` runs first."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            is_package = MODULES[module].name == "__init__.py"
            anchor = module.split(".")[: len(module.split(".")) - node.level + is_package]
            base = ".".join([*anchor, *([base] if base else [])])
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                 for alias in node.names]
    found = {name for name in names if name in MODULES}
    for name in list(found):
        parts = name.split(".")
        found |= {package for package in (".".join(parts[:end]) for end in range(2, len(parts)))
                  if not module.startswith(f"{package}.")}
    return sorted(found)


def import_lines() -> list[ImportLine]:
    """Every import of a package module by a package module."""
    found = []
    for module, path in MODULES.items():
        source = path.read_text()
        lines = source.splitlines()
        tree = ast.parse(source)
        in_functions = {id(node) for function in ast.walk(tree)
                        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
                        for node in ast.walk(function)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                found += [ImportLine(module, target, node.lineno, id(node) in in_functions,
                                     commented(lines, node.lineno))
                          for target in targets(module, node)]
    return found


def commented(lines: list[str], number: int) -> bool:
    """True when the import on line ``number`` (1-based), or the line above the group of
    imports it is in, carries a comment."""
    index = number - 1
    while index > 0 and lines[index - 1].strip().startswith(("import ", "from ")):
        index -= 1
    return "#" in lines[number - 1] or (index > 0 and "#" in lines[index - 1])


IMPORTS = import_lines()


def a_cycle(edges: dict[str, set[str]]) -> list[str]:
    """One import cycle of the graph (its modules, the first repeated at the end), or []."""
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> list[str]:
        if module in path:
            return [*path[path.index(module):], module]
        if module in done:
            return []
        path.append(module)
        for target in sorted(edges.get(module, ())):
            cycle = visit(target)
            if cycle:
                return cycle
        path.pop()
        done.add(module)
        return []

    for module in sorted(edges):
        cycle = visit(module)
        if cycle:
            return cycle
    return []


def test_the_graph_reads_every_module_and_its_imports():
    assert {"parley.cli", "parley.coordinator.turn_loop", "parley.workers.tasks",
            "parley.shared.settings", "parley.coordinator.policies"} <= set(MODULES)
    edges = {(line.module, line.target, line.in_function) for line in IMPORTS}
    assert ("parley.workers.tasks", "parley.workers.app", False) in edges
    assert ("parley.cli.services", "parley.api.server", True) in edges
    # ``from parley.coordinator import policies`` imports the module parley.coordinator.policies.
    assert ("parley.coordinator.turn_loop", "parley.coordinator.policies", False) in edges
    # Importing parley.client.results runs parley/client/__init__.py first.
    assert ("parley.views.terminal", "parley.client", False) in edges
    assert ("parley.coordinator.policies.bid", "parley.coordinator.policies", False) not in edges


def test_the_cycle_finder_finds_a_cycle():
    assert a_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert a_cycle({"a": {"b"}, "b": {"c"}, "d": {"a", "c"}}) == []


def test_no_module_of_the_package_is_in_an_import_cycle():
    # An import put off into a function is still a dependency: it breaks no cycle.
    edges: dict[str, set[str]] = {}
    for line in IMPORTS:
        if line.target != line.module:
            edges.setdefault(line.module, set()).add(line.target)
    cycle = a_cycle(edges)
    assert cycle == [], " -> ".join(cycle)


def test_every_import_inside_a_function_says_why():
    # Only to put off a heavy import (litellm, the Celery app, the server) until it is needed.
    unexplained = [f"{line.module}:{line.line}" for line in IMPORTS
                   if line.in_function and not line.has_comment]
    assert unexplained == []


def reached_from(modules: set[str]) -> set[str]:
    """Every package module that importing ``modules`` may import, directly or not."""
    reached = set(modules)
    while True:
        more = {line.target for line in IMPORTS if line.module in reached} - reached
        if not more:
            return reached
        reached |= more


def test_the_api_does_not_import_the_cli():
    reached = reached_from({module for module in MODULES if module.startswith("parley.api")})
    assert not {module for module in reached if module.split(".")[:2] == ["parley", "cli"]}


@pytest.mark.parametrize("teller", ["parley.cli.runs", "parley.cli.show", "parley.cli.follow",
                                    "parley.cli.demo", "parley.api.rooms", "parley.api.dashboard"])
def test_the_cli_the_demo_and_the_api_tell_turns_and_stops_through_one_explainer(teller):
    assert "parley.views.explain" in reached_from({teller})


# -- settings read once, litellm told before it loads -----------------------------------

# Where get_settings() may be called besides the CLI (whose every command is an entry
# point): the Celery app's build as a worker starts, and the Client's constructor, for its
# default.
SETTINGS_READERS = {("parley.workers.app", ""), ("parley.client.client", "Client.__init__")}


def settings_reads() -> set[tuple[str, str]]:
    """Each (module, enclosing definitions) that calls get_settings()."""
    found = set()

    def visit(node: ast.AST, module: str, within: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                visit(child, module, f"{within}.{child.name}".lstrip("."))
                continue
            if isinstance(child, ast.Call):
                name = getattr(child.func, "id", None) or getattr(child.func, "attr", None)
                if name == "get_settings":
                    found.add((module, within))
            visit(child, module, within)

    for module, path in MODULES.items():
        visit(ast.parse(path.read_text()), module, "")
    return found


def test_the_settings_are_read_at_the_entry_points_only():
    beyond_the_cli = {(module, within) for module, within in settings_reads()
                      if module.split(".")[:2] != ["parley", "cli"]}
    assert beyond_the_cli - SETTINGS_READERS == set()


def without_cost_map_variable() -> dict[str, str]:
    """This process's environment, less LITELLM_LOCAL_MODEL_COST_MAP."""
    return {name: value for name, value in os.environ.items()
            if name != "LITELLM_LOCAL_MODEL_COST_MAP"}


def test_reading_the_settings_leaves_the_environment_alone():
    code = ("import os\nfrom parley.shared.settings import Settings, get_settings\n"
            "Settings(); get_settings()\nprint(os.environ.get('LITELLM_LOCAL_MODEL_COST_MAP'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True, env=without_cost_map_variable())
    assert done.stdout.strip() == "None"


# Each is the first import of litellm in its process: a worker's calls, a worker's
# background preload, and a client counting tokens for swarms' "str" history.
LITELLM_LOADS = [
    "import parley.workers.llm",
    "from parley.workers.app import _import_litellm; _import_litellm()",
    "from parley.swarms.history import swarms_token_count; swarms_token_count('a b c')",
]


def test_litellm_reads_the_cost_map_it_ships_wherever_it_is_first_imported():
    report = ("from litellm.litellm_core_utils.get_model_cost_map import "
              "get_model_cost_map_source_info as info\nprint(info()['is_env_forced'])")
    # Side by side: importing litellm takes seconds.
    runs = [subprocess.Popen([sys.executable, "-c", f"{load}\n{report}"], text=True,
                             stdout=subprocess.PIPE, env=without_cost_map_variable())
            for load in LITELLM_LOADS]
    told = [run.communicate(timeout=120)[0].strip() for run in runs]
    assert told == ["True"] * len(LITELLM_LOADS)
