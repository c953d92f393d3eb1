"""``parley tools``: the tool catalog, what the live workers offer."""

from __future__ import annotations

import typer

from parley.cli import common
from parley.cli.common import JsonFlag, print_json
from parley.cli.errors import friendly
from parley.shared.tool_catalog import NO_TOOLS_HINT, catalog_json
from parley.views import terminal

app = typer.Typer()


@app.command()
@friendly
def tools(as_json: JsonFlag = False) -> None:
    """The tools the live workers offer: what each does, how it runs (approval,
    idempotent, its queue) and which workers offer it; a spec's agents may name these."""
    client = common.connect()
    catalog = client.tool_catalog()
    if as_json:
        print_json(catalog_json(catalog))
    elif catalog:
        common.console.print(terminal.tools_table(catalog))
    else:
        workers = len(client.tool_workers())
        print(f"no live worker offers tools ({workers} live worker(s) in the catalog): "
              f"{NO_TOOLS_HINT}")
