"""The benchmark suite itself, on a tiny workload, so that it cannot rot unnoticed."""

from __future__ import annotations

import pytest

from benchmarks import intent, report, turns

pytestmark = [pytest.mark.e2e]


def test_the_turn_benchmark_times_a_tiny_room_and_reports_it():
    results = turns.run(sizes=[2], turns=5, sleeps=[0.0], history_agents=2, history_turns=0)

    (row,) = results["runs"]
    assert (row["agents"], row["sleep_s"], row["turns"]) == (2, 0.0, 4)
    assert 0 < row["median_ms"] <= row["p95_ms"]
    assert row["coordinator_cpu_ms"] > 0 and row["worker_cpu_ms"] > 0
    assert 0 < row["decided_to_opened_ms"] < row["median_ms"]
    markdown = report.render({**results_frame(), "turns": results})
    assert "| 2 | 0 ms |" in markdown


def test_the_intent_benchmark_compares_both_modes_on_a_tiny_room_and_reports_it():
    results = intent.run([2], 3)

    full, two = results["rows"]
    assert (full["mode"], two["mode"]) == ("full", "intent")
    assert full["output_tokens_per_message"] == intent.REPLY_TOKENS * 2
    assert two["output_tokens_per_message"] == intent.REPLY_TOKENS + intent.INTENT_TOKENS * 2
    assert two["decision_to_first_chunk_ms"] > 0 and two["first_text_ms"] < full["first_text_ms"]
    assert results["goals"][0]["same_speakers"]
    markdown = report.render({**results_frame(), "intent": results})
    assert "## 8. Intent bidding and streaming" in markdown


def results_frame() -> dict:
    """The run-wide fields RESULTS.md needs besides the benchmarks' own results."""
    return {"command": "pytest", "date": "today", "wall_s": 1.0, "machine": {"CPU": "test"},
            "quiet": {"before": {"load": "0", "pytest": 1}, "after": {"load": "0", "pytest": 1}}}
