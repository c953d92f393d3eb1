"""Reading a room spec file: YAML or JSON, bounded in size and depth before it is parsed."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

from parley.shared.models import RoomSpec
from parley.shared.spec_limits import (
    DEFAULT_MAX_AGENTS,
    MAX_SPEC_BYTES,
    MAX_SPEC_DEPTH,
    SpecTooLarge,
    check_text_size,
    create_context,
)


def load_spec(path: str | Path, max_agents: int = DEFAULT_MAX_AGENTS) -> RoomSpec:
    """Read and validate a room spec from a YAML (or JSON) file, for a room of at most
    ``max_agents`` agents (the CLI passes its process's ``PARLEY_MAX_AGENTS``).

    Raises OSError, yaml.YAMLError, SpecTooLarge or pydantic's ValidationError.
    """
    with Path(path).open("rb") as file:
        text = file.read(MAX_SPEC_BYTES + 1)  # never more: the file may be huge
        check_text_size(max(len(text), os.fstat(file.fileno()).st_size))
    return RoomSpec.model_validate(_load_yaml(text), context=create_context(max_agents))


def _load_yaml(text: bytes) -> Any:
    try:
        return yaml.load(text, Loader=_SpecLoader)
    except RecursionError:
        raise SpecTooLarge("room spec too large: nested too deeply to read "
                           f"(limit {MAX_SPEC_DEPTH} levels)") from None
    except yaml.YAMLError:
        raise
    except Exception as error:  # noqa: BLE001 - see below
        # PyYAML's constructors raise plain Python errors for values they scanned but cannot
        # build: 2001-02-30, an integer of 5,000 digits, an empty !!int, !!float or !!timestamp.
        raise yaml.constructor.ConstructorError(problem=f"cannot read a value: {error}") from None


class _SpecLoader(yaml.SafeLoader):
    """PyYAML's safe loader, reading a JSON-style escaped surrogate pair ("\\ud83d\\ude00",
    as json.dumps writes an emoji) as the one character it stands for."""

    def construct_text(self, node: yaml.ScalarNode) -> str:
        """The scalar's text, with surrogate pairs joined; a lone surrogate is an error."""
        text = self.construct_scalar(node)
        if text.isascii() or not _SURROGATE.search(text):
            return text
        try:
            return text.encode("utf-16", "surrogatepass").decode("utf-16")
        except UnicodeDecodeError:
            raise yaml.constructor.ConstructorError(
                problem="text holds a lone surrogate (half of a \\uXXXX\\uXXXX pair)",
                problem_mark=node.start_mark) from None


_SURROGATE = re.compile("[\ud800-\udfff]")
_SpecLoader.add_constructor("tag:yaml.org,2002:str", _SpecLoader.construct_text)
