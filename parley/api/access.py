"""Who may do what through the API: identities from tokens, the role ladder, and the one
table of the least role each route needs.

Tokens come from two places. ``PARLEY_API_TOKENS`` are cluster-admin tokens, as before
organizations. ``PARLEY_API_TOKENS_FILE`` names a YAML or JSON file of tokens stored as
SHA-256 digests, each with its organization and role, and the organizations' limits::

    tokens:
      - {sha256: "<hex digest of the token>", organization: acme, role: operator, name: ci}
    organizations:
      acme: {max_live_rooms: 50, max_tokens_per_day: 2000000, max_cost_usd_per_day: 40}

The file is read again on SIGHUP and when its modification time changes; a file that no
longer reads keeps the identities loaded before (and says why in the log). Each load
writes the limits to Redis, where the coordinators read them (they never need the file).

======================  ============================================================
role                    may
======================  ============================================================
``viewer``              read its organization's rooms, follow their events
``operator``            also post, pause, resume, cancel, answer approvals, change a
                        mention room's floor
``admin``               also create, delete, archive and import rooms
``cluster-admin``       every organization's rooms; coordinators, workers, metrics
======================  ============================================================

A room of another organization reads as absent: the same 404 as a room that does not
exist, on every route, so nothing tells that it exists.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import json
import os
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
import yaml
from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from parley.shared.keys import Keys
from parley.shared.models import DEFAULT_ORGANIZATION
from parley.shared.organizations import OrgLimits, check_organization, write_limits
from parley.shared.settings import Settings

log = structlog.get_logger("parley.api")
# Where the middleware leaves the request's identity, in its scope's state.
IDENTITY = "identity"
# The file's modification time is looked at no more often than this.
RELOAD_CHECK_S = 1.0
_HEX_DIGEST = r"^[0-9a-f]{64}$"


class Role(enum.StrEnum):
    """A token's role; each may do what the one before it may, and more."""

    VIEWER = "viewer"  # read and follow
    OPERATOR = "operator"  # also run rooms: post, pause, cancel, approve
    ADMIN = "admin"  # also create, delete, archive, import
    CLUSTER_ADMIN = "cluster-admin"  # every organization, and the cluster's views

    @property
    def rank(self) -> int:
        """Its place on the ladder, 0 for viewer."""
        return list(Role).index(self)

    def allows(self, needed: Role) -> bool:
        """True when this role may do what ``needed`` may."""
        return self.rank >= needed.rank


VIEW, OPS, ADM, CLU = Role.VIEWER, Role.OPERATOR, Role.ADMIN, Role.CLUSTER_ADMIN
# The least role of every route but the open ones (/healthz, the dashboard's files); a
# test walks the app's routes and fails on one missing here.
ROUTE_ROLES: dict[tuple[str, str], Role] = {
    ("POST", "/rooms"): ADM,
    ("POST", "/rooms/import"): ADM,
    ("GET", "/rooms"): VIEW,
    ("GET", "/rooms/{room}"): VIEW,
    ("GET", "/rooms/{room}/spec"): VIEW,
    ("DELETE", "/rooms/{room}"): ADM,
    ("POST", "/rooms/{room}/pause"): OPS,
    ("POST", "/rooms/{room}/resume"): OPS,
    ("POST", "/rooms/{room}/cancel"): OPS,
    ("POST", "/rooms/{room}/archive"): ADM,
    ("POST", "/rooms/{room}/messages"): OPS,
    ("GET", "/rooms/{room}/messages"): VIEW,
    ("GET", "/rooms/{room}/turns"): VIEW,
    ("GET", "/rooms/{room}/queue"): VIEW,
    ("POST", "/rooms/{room}/agents/{agent}/{change}"): OPS,
    ("GET", "/rooms/{room}/approvals"): VIEW,
    ("POST", "/rooms/{room}/approvals/{approval_id}"): OPS,
    ("GET", "/rooms/{room}/replay"): VIEW,
    ("GET", "/rooms/{room}/tasks"): VIEW,
    ("POST", "/rooms/{room}/tasks"): OPS,
    ("DELETE", "/rooms/{room}/tasks/{task_id}"): OPS,
    ("GET", "/rooms/{room}/events"): VIEW,
    ("GET", "/events"): VIEW,
    ("GET", "/tools"): VIEW,
    ("GET", "/dashboard/rooms"): VIEW,
    ("GET", "/dashboard/rooms/{room}/turns"): VIEW,
    ("GET", "/dashboard/rooms/{room}/stats"): VIEW,
    ("GET", "/openapi.json"): VIEW,
    ("GET", "/metrics"): CLU,
    ("GET", "/coordinators"): CLU,
    ("GET", "/workers"): CLU,
}


def least_role(method: str, template: str) -> Role:
    """The least role the route needs; a route not in the table needs cluster-admin (a
    route forgotten there is closed, not open)."""
    return ROUTE_ROLES.get(("GET" if method == "HEAD" else method, template), CLU)


@dataclass(frozen=True)
class Identity:
    """Who a request is: a token's name, organization and role."""

    name: str
    organization: str
    role: Role

    def sees(self, organization: str) -> bool:
        """True when this identity may know of a room of ``organization``."""
        return self.role is Role.CLUSTER_ADMIN or organization == self.organization

    def scope(self, asked: str | None = None) -> str | None:
        """The organization whose rooms a listing shows: the identity's own, or for a
        cluster-admin the one ``asked`` (None: every organization's)."""
        return asked if self.role is Role.CLUSTER_ADMIN else self.organization


# Without any token the API serves loopback only, to whoever runs it: the cluster's operator.
OPERATOR_AT_LOOPBACK = Identity("loopback", DEFAULT_ORGANIZATION, Role.CLUSTER_ADMIN)


def identity_of(request: Request) -> Identity:
    """The request's identity, as the middleware found it."""
    return request.scope["state"][IDENTITY]


class TokenEntry(BaseModel):
    """One token of the file: its SHA-256 digest (never the token), organization, role and
    a name for the logs."""

    model_config = ConfigDict(extra="forbid", strict=True)

    sha256: str = Field(pattern=_HEX_DIGEST)
    organization: str = DEFAULT_ORGANIZATION
    role: Role = Field(strict=False)
    name: str = Field(default="", max_length=200)

    @field_validator("organization")
    @classmethod
    def _organization(cls, value: str) -> str:
        return check_organization(value)


class TokensFile(BaseModel):
    """The tokens file: its tokens, and each organization's limits."""

    model_config = ConfigDict(extra="forbid", strict=True)

    tokens: list[TokenEntry] = Field(default_factory=list)
    organizations: dict[str, OrgLimits] = Field(default_factory=dict)

    @field_validator("organizations")
    @classmethod
    def _organizations(cls, value: dict[str, OrgLimits]) -> dict[str, OrgLimits]:
        for name in value:
            check_organization(name)
        return value


class TokensFileError(ValueError):
    """The tokens file cannot be read, or is not as the model says (naming the field)."""


def digest(token: str) -> str:
    """A token's SHA-256 hex digest, as the file stores it."""
    return hashlib.sha256(token.encode()).hexdigest()


def read_tokens_file(path: str | Path) -> TokensFile:
    """The file at ``path`` (YAML, or JSON, which YAML reads too); TokensFileError naming
    what is wrong."""
    try:
        text = Path(path).read_text(encoding="utf-8")
        document = yaml.safe_load(text) if text.strip() else {}
        return TokensFile.model_validate(document if document is not None else {})
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise TokensFileError(f"PARLEY_API_TOKENS_FILE {path}: cannot read it: "
                              f"{str(error).splitlines()[0]}") from None
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the file"
        raise TokensFileError(f"PARLEY_API_TOKENS_FILE {path}: {where}: {first['msg']}"
                              ) from None


def new_entry(token: str, organization: str, role: Role, name: str = "") -> dict[str, Any]:
    """The file's entry for ``token``."""
    check_organization(organization)
    return {"sha256": digest(token), "organization": organization, "role": role.value,
            "name": name}


def entry_json(entry: dict[str, Any]) -> str:
    """An entry as one line to paste under ``tokens:`` (JSON is YAML too)."""
    return json.dumps(entry)


class Identities:
    """The tokens the API knows and who each is, kept current with the tokens file."""

    def __init__(self, settings: Settings, redis: Any = None, keys: Keys | None = None) -> None:
        self.path = settings.api_tokens_file
        self.cluster_tokens = [digest(token) for token in settings.api_tokens]
        self.redis, self.keys = redis, keys or Keys(settings.key_prefix)
        self.entries: list[TokenEntry] = []
        self.limits: dict[str, OrgLimits] = {}
        self._lock = threading.Lock()
        self._mtime: float | None = None
        self._checked = 0.0
        self._hup = False
        if self.path:
            self.load()

    @property
    def required(self) -> bool:
        """True when requests need a token."""
        return bool(self.cluster_tokens or self.path)

    def load(self) -> None:
        """Read the file (TokensFileError if it does not read) and write its limits."""
        assert self.path is not None
        mtime = os.stat(self.path).st_mtime if os.path.exists(self.path) else None
        loaded = read_tokens_file(self.path)
        with self._lock:
            self.entries, self.limits, self._mtime = loaded.tokens, loaded.organizations, mtime
        if self.redis is not None:
            write_limits(self.redis, self.keys, loaded.organizations)
        log.info("tokens_file_loaded", tokens=len(loaded.tokens),
                 organizations=len(loaded.organizations))

    def reload_soon(self, *_signal: Any) -> None:
        """Read the file again before the next request (the SIGHUP handler)."""
        self._hup = True

    def install_sighup(self) -> None:
        """Read the file again on SIGHUP (the main thread only may install it)."""
        if self.path and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGHUP, self.reload_soon)

    def refresh(self, now: float) -> None:
        """Read the file again after a SIGHUP, or when it changed; a file that does not
        read keeps what was loaded."""
        if not self.path or (not self._hup and now - self._checked < RELOAD_CHECK_S):
            return
        self._checked = now
        try:
            mtime = os.stat(self.path).st_mtime
        except OSError:
            mtime = None
        if not self._hup and mtime == self._mtime:
            return
        self._hup = False
        try:
            self.load()
        except TokensFileError as error:
            self._mtime = mtime  # said once, not at every request
            log.error("tokens_file_not_reloaded", error=str(error))

    def identify(self, token: str) -> Identity | None:
        """Who ``token`` is, or None. Every known digest is compared, in constant time."""
        given = digest(token).encode()
        found: Identity | None = None
        for known in self.cluster_tokens:
            if hmac.compare_digest(given, known.encode()):
                found = Identity("PARLEY_API_TOKENS", DEFAULT_ORGANIZATION, Role.CLUSTER_ADMIN)
        with self._lock:
            entries = list(self.entries)
        for entry in entries:
            if hmac.compare_digest(given, entry.sha256.encode()) and found is None:
                found = Identity(entry.name, entry.organization, entry.role)
        return found
