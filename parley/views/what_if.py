"""A what-if replay told as lines: the settings, each turn then and now, and the summary."""

from __future__ import annotations

from typing import Any

from parley.coordinator.policies.what_if import Outcome, Replay


def told(outcome: Outcome) -> str:
    """One turn's outcome in words."""
    if outcome.needs:
        who = f"{outcome.winner} would be asked to speak" if outcome.winner else "unknown"
        return f"{who} (needs {outcome.needs})"
    said = f"{outcome.winner} speaks" if outcome.winner else "nobody speaks"
    return f"{said}, the run ends ({outcome.stop.value})" if outcome.stop else said


def stop_words(stop: dict[str, Any] | None) -> str:
    """A stop of the summary: its reason and turn, or that none is known."""
    return f"{stop['reason']} at turn {stop['turn']}" if stop else "none in the replayed turns"


def share_words(share: dict[str, int]) -> str:
    """A floor share as ``a 2, b 1``."""
    return ", ".join(f"{name} {count}" for name, count in sorted(share.items())) or "nobody"


def replay_lines(replay: Replay) -> list[str]:
    """The replay as ``parley replay`` prints it."""
    changes = ", ".join(f"{name} {then} -> {now}" for name, (then, now) in replay.settings.items())
    lines = [f"room {replay.room}, run {replay.run} ({replay.policy}): {changes}"]
    for turn in replay.turns:
        mark = "CHANGED" if turn.changed else "same"
        lines.append(f"turn {turn.turn}: then {told(turn.then)}; now {told(turn.now)}  [{mark}]")
    first = replay.divergence
    summary = replay.as_json()["summary"]
    if first is not None:
        lines.append(f"stopped at turn {first.turn}, the first whose outcome differs: "
                     "after it the transcript would differ, so the recorded answers no "
                     "longer apply")
    else:
        lines.append("no turn's outcome differs under these settings")
    lines += [
        f"turns replayed: {summary['turns_replayed']} of {summary['turns_recorded']}",
        f"first divergence: {f'turn {first.turn}' if first else 'none'}",
        f"floor share: then {share_words(summary['floor_share']['then'])}; "
        f"now {share_words(summary['floor_share']['now'])}",
        f"stop: then {stop_words(summary['stop']['then'])}; "
        f"now {stop_words(summary['stop']['now'])}",
    ]
    return lines
