"""The docs site builds offline with no warning (every page in the navigation, every link
and anchor found), its reference pages are made from the code, and the README stays a
short front page whose examples hold."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from parley.shared.models import RoomSpec

ROOT = Path(__file__).resolve().parents[2]
QUIET = {"NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
                          cwd=ROOT, env={**os.environ, **QUIET}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return out, done.stderr


def test_the_site_builds_with_no_warning(site):
    _, log = site
    assert "WARNING" not in log


def test_the_reference_pages_hold_what_the_code_defines(site):
    out, _ = site
    from parley.shared.settings import Settings, variable_name

    settings = (out / "reference" / "settings" / "index.html").read_text()
    assert all(variable_name(name) in settings for name in Settings.model_fields)
    spec = (out / "reference" / "room-spec" / "index.html").read_text()
    assert "max_tool_rounds" in spec and "recency_penalty" in spec
    cli = (out / "reference" / "cli" / "index.html").read_text()
    assert "parley rooms create" in cli and "parley schema" in cli
    api = (out / "reference" / "http-api" / "index.html").read_text()
    assert "/rooms/{room}/approvals" in api
    assert (out / "reference" / "room-spec.schema.json").exists()
    assert (out / "benchmarks" / "results" / "index.html").exists()


def test_the_readme_is_a_short_front_page_with_the_two_quickstart_commands():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    quickstart = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", quickstart, re.S).group(1)
    assert [line.split("#")[0].strip() for line in block.splitlines()] == ["make demo", "make test"]


def test_the_readmes_spec_example_is_a_valid_spec():
    readme = (ROOT / "README.md").read_text()
    specs = re.findall(r"```yaml\n(.*?)```", readme, re.S)
    assert specs
    for spec in specs:
        RoomSpec.model_validate(yaml.safe_load(spec))


def test_the_readmes_links_reach_files_of_the_repository():
    readme = (ROOT / "README.md").read_text()
    targets = [target.split("#")[0] for target in re.findall(r"\]\(([^)\s]+)\)", readme)
               if not target.startswith(("http", "#"))]
    assert targets
    assert [target for target in targets if not (ROOT / target).exists()] == []
