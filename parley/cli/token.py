"""``parley token new``: a new API token for one organization and role."""

from __future__ import annotations

import secrets
from typing import Annotated

import typer

from parley.cli.common import JsonFlag, print_json
from parley.cli.errors import friendly

app = typer.Typer(no_args_is_help=True, help="Make API tokens for PARLEY_API_TOKENS_FILE.")
# 32 random bytes, URL-safe: as strong as the SHA-256 digest the file keeps of it.
TOKEN_BYTES = 32
ROLES = ("viewer", "operator", "admin", "cluster-admin")


@app.command("new")
@friendly
def token_new(
    org: Annotated[str, typer.Option("--org", help="The token's organization")] = "default",
    role: Annotated[str, typer.Option("--role", help="viewer, operator, admin or "
                                      "cluster-admin")] = "viewer",
    name: Annotated[str, typer.Option("--name", help="A name for the logs")] = "",
    as_json: JsonFlag = False,
) -> None:
    """Print a new token, once (it is not kept anywhere), and the entry to add under
    ``tokens:`` in PARLEY_API_TOKENS_FILE (its SHA-256 digest, organization, role)."""
    from parley.api.access import Role, entry_json, new_entry  # FastAPI loads only here

    if role not in ROLES:
        raise ValueError(f"invalid role {role!r}: use one of {', '.join(ROLES)}")
    token = secrets.token_urlsafe(TOKEN_BYTES)
    entry = new_entry(token, org, Role(role), name)
    if as_json:
        print_json({"token": token, "entry": entry})
        return
    print(f"token: {token}")
    print("add to PARLEY_API_TOKENS_FILE under tokens: (the token itself is shown only now)")
    print(f"  - {entry_json(entry)}")
