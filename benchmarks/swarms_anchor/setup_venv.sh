#!/usr/bin/env bash
# Create the swarms venv used by run_anchor.py (idempotent).
# swarms and parley install into one environment (swarms 16 pins litellm 1.76.1, which
# parley accepts); the anchor keeps swarms in a venv of its own so that it measures
# swarms alone, on the dependency versions swarms itself resolves.
# Prints the venv path on stdout; everything else goes to stderr.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${SWARMS_VENV:-$(cd "$HERE/.." && pwd)/.swarms-venv}"
SPEC="${SWARMS_SPEC:-swarms>=16,<17}"

export SWARMS_TELEMETRY_ON=false
export LITELLM_LOCAL_MODEL_COST_MAP=True
# Importing swarms creates $WORKSPACE_DIR (default: ./agent_workspace); keep it out of the repo.
if [ -z "${WORKSPACE_DIR:-}" ]; then
    WORKSPACE_DIR="$(mktemp -d)"
    trap 'rm -rf "$WORKSPACE_DIR"' EXIT
    export WORKSPACE_DIR
fi

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import swarms' >/dev/null 2>&1; then
    echo "swarms venv already usable, skipping install" >&2
else
    python3 -m venv "$VENV" >&2
    "$VENV/bin/python" -m pip install --quiet --upgrade pip >&2
    "$VENV/bin/python" -m pip install --quiet "$SPEC" >&2
    "$VENV/bin/python" -c 'import swarms' >&2
fi
echo "$VENV"
