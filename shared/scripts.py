"""The Lua scripts in ``shared/lua/``, read once and registered per Redis client."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Any

SCRIPT_NAMES = (
    "acquire", "acquire_many", "renew", "release", "drain", "open_turn", "commit", "end_run", "unschedule",
    "count_failed_take", "create", "reserve", "post", "write_answers", "pause", "resume",
    "cancel", "delete", "floor_op", "write_chunk", "tool_journal", "request_approval",
    "answer_approval", "task_start", "task_claim", "task_beat", "task_finish", "post_handback",
    "claim_org_room", "task_room_log",
)


# A line ``-- @include NAME`` in a script stands for the text of ``lua/lib/NAME.lua``: a
# script sent to Redis is one text, so the pieces several scripts share are put in there.
INCLUDE = re.compile(r"^-- @include (\w+)$", re.MULTILINE)


@cache
def source(name: str) -> str:
    """The text of ``lua/<name>.lua``, its includes put in."""
    lua = resources.files("parley.shared").joinpath("lua")
    return INCLUDE.sub(lambda line: lua.joinpath("lib", f"{line[1]}.lua").read_text().rstrip(),
                       lua.joinpath(f"{name}.lua").read_text())


class Scripts:
    """Every script registered on one client (sync or asyncio); call as ``scripts.commit(...)``.

    redis-py's ``Script`` runs EVALSHA and loads the script on NOSCRIPT, so a Redis restart
    that forgot the scripts costs one extra round trip, not an error.
    """

    def __init__(self, client: Any) -> None:
        for name in SCRIPT_NAMES:
            setattr(self, name, client.register_script(source(name)))

    acquire: Any
    acquire_many: Any
    renew: Any
    release: Any
    drain: Any
    open_turn: Any
    commit: Any
    end_run: Any
    unschedule: Any
    count_failed_take: Any
    create: Any
    reserve: Any
    post: Any
    write_answers: Any
    pause: Any
    resume: Any
    cancel: Any
    delete: Any
    floor_op: Any
    write_chunk: Any
    tool_journal: Any
    request_approval: Any
    answer_approval: Any
    task_start: Any
    task_claim: Any
    task_beat: Any
    task_finish: Any
    post_handback: Any
    claim_org_room: Any
    task_room_log: Any
